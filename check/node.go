package check

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/slurmver"
	"github.com/persyst/persyst/spank/options"
)

// Node is what the checks share about the node, read once.
type Node struct {
	o Options
	h hostfs.FS

	// release is slurmd's release (or the commands' where no slurmd is), from
	// releaseFrom; releaseErr says why it is not known.
	release     slurmver.Release
	releaseFrom string
	releaseErr  error
	// slurmConf is Slurm's configuration (keys in lower case), from slurmConfFrom.
	slurmConf     map[string]string
	slurmConfFrom string
	slurmConfErr  error

	// stackPath is PlugStackConfig; plugins its plugin lines (includes followed).
	stackPath     string
	plugins       []stackLine
	stackProblems []string
	stackErr      error
	// persyst are the lines that load persyst's plugin, with what their file is.
	persyst []persystLine
}

// persystLine is a plugstack line that loads persyst's plugin.
type persystLine struct {
	stackLine
	info    pluginInfo
	infoErr error
	args    options.Config
	argErrs []error
}

func newNode(ctx context.Context, o Options) *Node {
	n := &Node{o: o, h: o.Host}
	n.readRelease(ctx)
	n.readSlurmConf(ctx)
	n.stackPath = n.conf("PlugStackConfig", filepath.Join(n.slurmConfDir(), "plugstack.conf"))
	n.plugins, n.stackProblems, n.stackErr = loadStack(n.h, n.stackPath, n.pluginDir())
	for _, p := range n.plugins {
		l := persystLine{stackLine: p}
		if p.Resolved != "" {
			l.info, l.infoErr = readPlugin(n.h.Path(p.Resolved))
		}
		if l.info.Name != "persyst" && !strings.Contains(filepath.Base(p.Path), "persyst") {
			continue
		}
		l.args, l.argErrs = options.ParseArgs(p.Args)
		n.persyst = append(n.persyst, l)
	}
	return n
}

func (n *Node) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	return n.o.Run(ctx, name, args...)
}

// readRelease asks slurmd its release (what loads plugins), else scontrol.
func (n *Node) readRelease(ctx context.Context) {
	for _, c := range [][]string{{"slurmd", "-V"}, {"scontrol", "--version"}} {
		out, err := n.run(ctx, c[0], c[1:]...)
		if err == nil {
			n.release, err = slurmver.Parse(string(out))
		}
		if err == nil {
			n.releaseFrom, n.releaseErr = strings.Join(c, " "), nil
			return
		}
		if n.releaseErr == nil {
			n.releaseErr = err
		}
	}
}

// readSlurmConf reads Slurm's configuration as slurmctld has it (scontrol show config),
// else from slurm.conf.
func (n *Node) readSlurmConf(ctx context.Context) {
	out, err := n.run(ctx, "scontrol", "show", "config")
	if err == nil {
		n.slurmConf, n.slurmConfFrom = parseShowConfig(strings.NewReader(string(out))), "scontrol show config"
		return
	}
	n.slurmConfErr = err
	path := filepath.Join(n.slurmConfDir(), "slurm.conf")
	if f, ferr := os.Open(n.h.Path(path)); ferr == nil {
		n.slurmConf, n.slurmConfFrom = parseSlurmConf(f), path
		f.Close()
	}
}

// slurmConfDir is where slurm.conf and the files beside it are (SLURM_CONF's directory).
func (n *Node) slurmConfDir() string {
	if s := os.Getenv("SLURM_CONF"); filepath.IsAbs(s) {
		return filepath.Dir(s)
	}
	return "/etc/slurm"
}

// conf is a key of Slurm's configuration, or def.
func (n *Node) conf(key, def string) string {
	if v, ok := n.slurmConf[strings.ToLower(key)]; ok && v != "" && v != "(null)" {
		return v
	}
	return def
}

// pluginDir is where slurmd looks for plugins named by a relative path: PluginDir, else
// the directories Debian's and the RPMs' Slurm are built with.
func (n *Node) pluginDir() string {
	return n.conf("PluginDir", "/usr/lib/x86_64-linux-gnu/slurm-wlm:/usr/lib64/slurm:/usr/lib/slurm")
}

// parseShowConfig reads `scontrol show config`: "Key = value" lines under headings.
func parseShowConfig(r io.Reader) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " = ")
		if !ok {
			continue
		}
		out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return out
}

// parseSlurmConf reads the keys that start slurm.conf's lines ("Key=value", comments
// after "#"); node and partition lines are left out.
func parseSlurmConf(r io.Reader) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) != 1 {
			continue
		}
		if k, v, ok := strings.Cut(f[0], "="); ok {
			out[strings.ToLower(k)] = v
		}
	}
	return out
}
