package syscount

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Read and write calls are counted by what they went to, regular files, pipes, sockets
// or terminals and character devices (Target), by the file's type (inode.i_mode &
// S_IFMT), at the call's end; calls on other files (block devices, directories) are not:
// - fentry mode: fexit programs on vfs_read and vfs_write, whose first argument is the
//   file and whose return value the bytes;
// - raw tracepoint mode: the program on the raw tracepoint sys_exit takes read(2),
//   pread64(2), write(2) and pwrite64(2) by their number, and finds the file from the
//   call's first argument, the descriptor, in the calling task's descriptor table.

// attachFiles loads fexit programs on vfs_read and vfs_write that count the calls and
// their bytes by target; with either missing, targets are not told apart.
func (l *loader) attachFiles(spec *btf.Spec) error {
	inode, err := memberOffset(spec, "file", "f_inode")
	if err != nil {
		return err
	}
	mode, err := memberOffset(spec, "inode", "i_mode")
	if err != nil {
		return err
	}
	n := len(l.progs.progs)
	for _, x := range []struct {
		fn   string
		slot int
	}{{"vfs_read", FileReadCalls}, {"vfs_write", FileWriteCalls}} {
		// ctx: file, buf, count, pos, then the return value (fexit).
		insns := append(l.fentryHead(true, "go"),
			asm.LoadMem(asm.R8, asm.R1, 32, asm.DWord),
			asm.JSLT.Imm(asm.R8, 0, "exit"),
			asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord),
			asm.LoadMem(asm.R2, asm.R2, int16(inode), asm.DWord),
			asm.JEq.Imm(asm.R2, 0, "exit"),
			asm.LoadMem(asm.R2, asm.R2, int16(mode), asm.Half),
			asm.Mov.Imm(asm.R6, int32(8*x.slot)),
		)
		insns = append(insns, byTarget("exit", "counted")...)
		insns = append(insns, l.tail(true, "")...)
		if err := l.attach(spec, "persyst_"+trim(x.fn[4:]), ebpf.AttachTraceFExit, x.fn, insns); err != nil {
			for _, p := range l.progs.progs[n:] {
				p.Close()
			}
			l.progs.progs = l.progs.progs[:n]
			return fmt.Errorf("program on %s: %w", x.fn, err)
		}
	}
	return nil
}

// memberOffset is the byte offset of member in the kernel's struct typ.
func memberOffset(spec *btf.Spec, typ, member string) (uint32, error) {
	var st *btf.Struct
	if err := spec.TypeByName(typ, &st); err != nil {
		return 0, fmt.Errorf("struct %s: %w", typ, err)
	}
	for _, m := range st.Members {
		if m.Name == member {
			return m.Offset.Bytes(), nil
		}
	}
	return 0, fmt.Errorf("struct %s has no member %s", typ, member)
}

// regsLayout names where struct pt_regs keeps, at a system call's exit, its number and
// its first argument (the register that held it may carry the return value by then).
type regsLayout struct {
	nr     string
	nrSize asm.Size
	arg0   string
}

// rawFiles is the part of the sys_exit program (attachRaw) that counts read and write
// calls and their bytes by target, from its label "fd" on; it expects the
// context in r7, the registers in r2 and the call's number in r3.
func (l *loader) rawFiles(spec *btf.Spec) (asm.Instructions, error) {
	rd, rok := syscallNumbers["read"]
	prd, pok := syscallNumbers["pread64"]
	wr, wok := syscallNumbers["write"]
	pwr, pwok := syscallNumbers["pwrite64"]
	if !rok || !pok || !wok || !pwok {
		return nil, fmt.Errorf("no read and write system call numbers known for this architecture")
	}
	var off struct{ arg0, files, fdt, maxFDs, fd, inode, mode uint32 }
	for _, m := range []struct {
		to          *uint32
		typ, member string
	}{
		{&off.arg0, "pt_regs", exitRegs.arg0},
		{&off.files, "task_struct", "files"}, {&off.fdt, "files_struct", "fdt"},
		{&off.maxFDs, "fdtable", "max_fds"}, {&off.fd, "fdtable", "fd"},
		{&off.inode, "file", "f_inode"}, {&off.mode, "inode", "i_mode"},
	} {
		o, err := memberOffset(spec, m.typ, m.member)
		if err != nil {
			return nil, err
		}
		*m.to = o
	}
	// r6 is the slot, r7 the descriptor, r8 the bytes (the return value, ctx[1]).
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R6, 8*FileReadCalls),
		asm.JEq.Imm(asm.R3, int32(rd), "fd"),
		asm.JEq.Imm(asm.R3, int32(prd), "fd"),
		asm.Mov.Imm(asm.R6, 8*FileWriteCalls),
		asm.JEq.Imm(asm.R3, int32(wr), "fd"),
		asm.JEq.Imm(asm.R3, int32(pwr), "fd"),
		asm.Ja.Label("files_exit"),
		asm.LoadMem(asm.R8, asm.R7, 8, asm.DWord).WithSymbol("fd"),
		asm.JSLT.Imm(asm.R8, 0, "files_exit"),
		asm.LoadMem(asm.R7, asm.R2, int16(off.arg0), asm.DWord),
		asm.FnGetCurrentTaskBtf.Call(),
		asm.LoadMem(asm.R1, asm.R0, int16(off.files), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "files_exit"),
		asm.LoadMem(asm.R1, asm.R1, int16(off.fdt), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "files_exit"),
		asm.LoadMem(asm.R2, asm.R1, int16(off.maxFDs), asm.Word),
		asm.JGE.Reg(asm.R7, asm.R2, "files_exit"),
		asm.LoadMem(asm.R3, asm.R1, int16(off.fd), asm.DWord),
		asm.LSh.Imm(asm.R7, 3),
		asm.Add.Reg(asm.R3, asm.R7),
	}
	// Three reads through plain pointers: the descriptor's file, its inode, the mode.
	for i, x := range []struct {
		add  uint32
		size int32
	}{{0, 8}, {off.inode, 8}, {off.mode, 2}} {
		if x.add != 0 {
			insns = append(insns, asm.Add.Imm(asm.R3, int32(x.add)))
		}
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -24),
			asm.Mov.Imm(asm.R2, x.size),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, "files_exit"),
		)
		if i < 2 {
			insns = append(insns,
				asm.LoadMem(asm.R3, asm.RFP, -24, asm.DWord),
				asm.JEq.Imm(asm.R3, 0, "files_exit"))
		}
	}
	insns = append(insns, asm.LoadMem(asm.R2, asm.RFP, -24, asm.Half))
	insns = append(insns, byTarget("files_exit", "files_counted")...)
	return append(insns, l.tail(true, "files_")...), nil
}

// byTarget moves the slot in r6, a file's read or write calls, to the target's whose
// type is the mode in r2 (IOSlot), and goes on at its label next; a file of another
// type goes to exit.
func byTarget(exit, next string) asm.Instructions {
	insns := asm.Instructions{asm.And.Imm(asm.R2, unix.S_IFMT)}
	for t, mode := range targetModes {
		if t > 0 {
			insns = append(insns, asm.Add.Imm(asm.R6, 8*ioSlots))
		}
		insns = append(insns, asm.JEq.Imm(asm.R2, mode, next))
	}
	return append(insns, asm.Ja.Label(exit), asm.Mov.Reg(asm.R2, asm.R2).WithSymbol(next))
}
