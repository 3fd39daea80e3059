// The loaded programs and their links: what counts, and for how long it has.

package syscount

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// programs are the loaded programs and, while attached, their links; they keep the
// time they have counted in all. Their user (Counter) holds its lock around them.
//
// The raw tracepoint counts while attached: the sampler attaches and detaches it (the
// attached program is what costs, every system call of the node). fentry programs built
// with a budget (gated) are attached once, and count while their gate is open: they
// begin by reading it (a word of window's value) and return at once while it is closed,
// so that the sampler opens and closes it instead (attaching and detaching a trampoline
// waits for a grace period of the kernel's and rewrites the kernel's code); a call then
// pays the trampoline alone.
type programs struct {
	progs    []*ebpf.Program
	at       ebpf.AttachType
	links    []link.Link
	now      func() time.Time
	linkedAt time.Time // since when counting, if counting now
	attached Attached  // until linkedAt, if counting now
	// window holds where the programs count (Counts.Sampled's offset while sampled, else
	// 0) and, gated, whether they count at all; sampled and open say which.
	window        *ebpf.Map
	sampled, open bool
	gated         bool
	// turn, if set, is called where the way the programs count changes, with the way
	// they counted until then (Counter.turn).
	turn func(counting, sampled bool)
}

// sampledOffset is where Counts.Sampled begins.
const sampledOffset = uint32(unsafe.Offsetof(Counts{}.Sampled))

// Offsets in window's value: where the programs count, and the gate (gated programs
// count while it is not 0).
const (
	windowOffset = 0
	windowGate   = 4
)

// store writes where the programs count and their gate.
func (p *programs) store(sampled, open bool) error {
	var v [2]uint32
	if sampled {
		v[0] = sampledOffset
	}
	if open {
		v[1] = 1
	}
	return p.window.Update(uint32(0), v, ebpf.UpdateAny)
}

// setSampled makes the programs count into Counts.Sampled (on) or Whole from now, and
// the time counted from now count as such.
func (p *programs) setSampled(on bool) error {
	if on == p.sampled {
		return nil
	}
	p.turned(p.counting(), p.sampled)
	if err := p.store(on, p.open); err != nil {
		return fmt.Errorf("syscount: count in windows %v: %w", on, err)
	}
	p.addAttached()
	p.sampled = on
	return nil
}

// turned calls turn, if set.
func (p *programs) turned(counting, sampled bool) {
	if p.turn != nil {
		p.turn(counting, sampled)
	}
}

// counting says whether the programs count now: attached, and gated ones with their gate
// open.
func (p *programs) counting() bool { return p.linked() && (!p.gated || p.open) }

// resume makes the programs count: attached (the raw tracepoint), or gated ones' gate
// opened (attached first where they are not).
func (p *programs) resume() error {
	if !p.linked() {
		if err := p.link(); err != nil {
			return err
		}
	}
	if !p.gated || p.open {
		return nil
	}
	p.turned(false, p.sampled)
	if err := p.store(p.sampled, true); err != nil {
		return fmt.Errorf("syscount: open the programs' gate: %w", err)
	}
	p.open, p.linkedAt = true, p.now()
	return nil
}

// pause stops the programs counting: detached (the raw tracepoint), or gated ones' gate
// closed (attached, for the trampoline's cost alone). Where the gate cannot be closed they
// are detached.
func (p *programs) pause() {
	if !p.gated {
		p.unlink()
		return
	}
	p.addAttached()
	if !p.open {
		return
	}
	p.turned(true, p.sampled)
	if err := p.store(p.sampled, false); err != nil {
		p.unlink()
		return
	}
	p.open = false
}

// addAttached adds the time counted since linkedAt to its kind, and starts anew.
func (p *programs) addAttached() {
	if !p.counting() {
		return
	}
	now := p.now()
	if p.sampled {
		p.attached.Sampled += now.Sub(p.linkedAt)
	} else {
		p.attached.Whole += now.Sub(p.linkedAt)
	}
	p.linkedAt = now
}

func (p *programs) add(prog *ebpf.Program, at ebpf.AttachType) {
	p.progs = append(p.progs, prog)
	p.at = at
}

// link attaches every program; on failure none stays attached. The programs are
// attached side by side: attaching or detaching a trampoline waits for a grace period
// of the kernel's, which concurrent waits share (one after another, eight fentry
// programs took seconds on an emulated node). Gated programs are attached with their
// gate as it is (closed, after unlink): they count once resumed.
func (p *programs) link() error {
	was := p.counting()
	links := make([]link.Link, len(p.progs))
	errs := make([]error, len(p.progs))
	var wg sync.WaitGroup
	for i, prog := range p.progs {
		wg.Go(func() {
			links[i], errs[i] = link.AttachTracing(link.TracingOptions{Program: prog, AttachType: p.at})
		})
	}
	wg.Wait()
	for i, l := range links {
		if errs[i] == nil {
			p.links = append(p.links, l)
		}
	}
	// The programs count from here (attaching them took a grace period of the kernel's,
	// up to tens of ms under emulation), as the time attached does.
	p.turned(was, p.sampled)
	p.linkedAt = p.now()
	if err := errors.Join(errs...); err != nil {
		p.unlink()
		return fmt.Errorf("syscount: attach: %w", err)
	}
	return nil
}

// unlink detaches every program, side by side; a gated program's gate is closed.
func (p *programs) unlink() {
	p.turned(p.counting(), p.sampled)
	p.addAttached()
	if p.gated && p.open && p.store(p.sampled, false) == nil {
		p.open = false
	}
	var wg sync.WaitGroup
	for _, l := range p.links {
		wg.Go(func() { l.Close() })
	}
	wg.Wait()
	p.links = nil
}

func (p *programs) linked() bool { return len(p.links) > 0 }

// attachedTime returns now and the time counted in all up to it.
func (p *programs) attachedTime() (now time.Time, d Attached) {
	if !p.counting() {
		return p.now(), p.attached
	}
	p.addAttached()
	return p.linkedAt, p.attached
}

// close detaches and closes every program.
func (p *programs) close() error {
	p.unlink()
	var errs []error
	for _, prog := range p.progs {
		errs = append(errs, prog.Close())
	}
	p.progs = nil
	return errors.Join(errs...)
}
