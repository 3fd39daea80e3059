package treeauth

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Munger creates and decodes MUNGE credentials through the node's munged. It runs
// MUNGE's own commands (munge, unmunge from Debian's munge package, installed wherever
// Slurm runs): persyst stays a static binary without libmunge, and a credential is made
// or decoded once per connection of the tree, not per call, so their cost (a few
// milliseconds) does not matter.
type Munger struct {
	// Socket is munged's socket ("": munge's default, /run/munge/munge.socket.2).
	Socket string
	// Munge and Unmunge are the commands ("": found on PATH).
	Munge, Unmunge string
}

// Decoded is what a credential says: who made it (uid and gid, as munged saw them on
// the host that encoded it) and the payload.
type Decoded struct {
	UID, GID uint32
	Host     string // the encoding host, as munged reports it
	Payload  []byte
}

// maxCred bounds a credential (MUNGE's are a few hundred bytes for a small payload).
const maxCred = 4096

func (m Munger) args(extra ...string) []string {
	if m.Socket != "" {
		extra = append([]string{"--socket=" + m.Socket}, extra...)
	}
	return extra
}

func orDefault(cmd, def string) string {
	if cmd == "" {
		return def
	}
	return cmd
}

// Encode returns a credential of the calling process's uid and gid carrying payload.
func (m Munger) Encode(ctx context.Context, payload []byte) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, orDefault(m.Munge, "munge"), m.args()...)
	cmd.Stdin = bytes.NewReader(payload)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("munge: %v: %s", err, firstLine(errOut.String()))
	}
	cred := strings.TrimSpace(out.String())
	if cred == "" || len(cred) > maxCred {
		return "", fmt.Errorf("munge: a credential of %d bytes", len(cred))
	}
	return cred, nil
}

// Decode checks a credential with munged (its key, its time to live, its replay cache:
// a credential decodes once) and returns what it says.
func (m Munger) Decode(ctx context.Context, cred string) (Decoded, error) {
	if cred == "" || len(cred) > maxCred || strings.ContainsAny(cred, "\n\r") {
		return Decoded{}, errors.New("unmunge: malformed credential")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, orDefault(m.Unmunge, "unmunge"), m.args("--numeric", "--keys=STATUS,UID,GID,ENCODE_HOST")...)
	cmd.Stdin = strings.NewReader(cred + "\n")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return Decoded{}, fmt.Errorf("unmunge: %v: %s", err, firstLine(errOut.String()))
	}
	return parseUnmunge(out.Bytes())
}

// parseUnmunge reads unmunge's output: "KEY: value" lines, a blank line, the payload.
func parseUnmunge(b []byte) (Decoded, error) {
	meta, payload, _ := bytes.Cut(b, []byte("\n\n"))
	var d Decoded
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(meta))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		// unmunge prints "KEY:  value": the key is taken exactly, the value trimmed.
		v = strings.TrimSpace(v)
		seen[k] = true
		switch k {
		case "STATUS":
			if v != "0" && !strings.HasPrefix(v, "Success") {
				return Decoded{}, fmt.Errorf("unmunge: status %s", v)
			}
		case "UID", "GID":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return Decoded{}, fmt.Errorf("unmunge: %s %q", k, v)
			}
			if k == "UID" {
				d.UID = uint32(n)
			} else {
				d.GID = uint32(n)
			}
		case "ENCODE_HOST":
			d.Host = v
		}
	}
	if !seen["STATUS"] || !seen["UID"] || !seen["GID"] {
		return Decoded{}, errors.New("unmunge: no status, uid or gid in its output")
	}
	d.Payload = payload
	return d, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
