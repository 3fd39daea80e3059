package check

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/persyst/persyst/hostfs"
)

// stackLine is a plugin line of plugstack.conf: "required|optional PATH [ARGS...]".
type stackLine struct {
	File     string
	Line     int
	Required bool
	Include  bool     // an include line: Path is a glob pattern
	Path     string   // as written
	Args     []string // the plugin's arguments
	// Resolved is the plugin file slurmd loads ("" : none found): Path itself when
	// absolute, else the first of PluginDir's directories that has it.
	Resolved string
}

// stackFile is one plugstack file, parsed as Slurm's spank.c does: "#" starts a
// comment; words are separated by spaces and tabs; the first is required, optional or
// include.
type stackFile struct {
	lines []stackLine // plugins and includes, in the file's order (slurmd's)
	errs  []string    // lines Slurm ignores (an invalid type stops the file's loading)
}

// parseStack reads one plugstack file; name is its path, for the lines' File.
func parseStack(r io.Reader, name string) (stackFile, error) {
	var f stackFile
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		w := strings.Fields(line)
		if len(w) == 0 {
			continue
		}
		l := stackLine{File: name, Line: n}
		switch w[0] {
		case "required", "optional", "include":
		default:
			f.errs = append(f.errs, fmt.Sprintf("%s:%d: %q is not required, optional or include: slurmd stops reading the file here", name, n, w[0]))
			return f, sc.Err()
		}
		if len(w) < 2 {
			f.errs = append(f.errs, fmt.Sprintf("%s:%d: %s without a path: slurmd ignores the line", name, n, w[0]))
			continue
		}
		l.Path, l.Args, l.Required, l.Include = w[1], w[2:], w[0] == "required", w[0] == "include"
		f.lines = append(f.lines, l)
	}
	return f, sc.Err()
}

// maxIncludeDepth bounds include loops.
const maxIncludeDepth = 8

// loadStack reads the plugstack file path (in h) with its includes, as slurmd does: an
// include's relative pattern is taken from the including file's directory, and a
// plugin's relative path is looked for in pluginDir (colon-separated). A missing file is
// an empty stack, as for slurmd.
func loadStack(h hostfs.FS, path, pluginDir string) (plugins []stackLine, problems []string, err error) {
	var load func(path string, depth int) error
	load = func(path string, depth int) error {
		if depth > maxIncludeDepth {
			problems = append(problems, fmt.Sprintf("%s: includes nest deeper than %d: not followed", path, maxIncludeDepth))
			return nil
		}
		fh, err := os.Open(h.Path(path))
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("plugstack: %w", err)
		}
		f, err := parseStack(fh, path)
		fh.Close()
		if err != nil {
			return fmt.Errorf("plugstack %s: %w", path, err)
		}
		problems = append(problems, f.errs...)
		for _, l := range f.lines {
			if !l.Include {
				l.Resolved = resolvePlugin(h, l.Path, pluginDir)
				plugins = append(plugins, l)
				continue
			}
			pattern := l.Path
			if !filepath.IsAbs(pattern) {
				pattern = filepath.Join(filepath.Dir(path), pattern)
			}
			matches, _ := filepath.Glob(h.Path(pattern))
			sort.Strings(matches)
			for _, m := range matches {
				if err := load(h.Rel(m), depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err = load(path, 0)
	return plugins, problems, err
}

// resolvePlugin is the file slurmd loads for a plugin line's path ("": none).
func resolvePlugin(h hostfs.FS, path, pluginDir string) string {
	if filepath.IsAbs(path) {
		if _, err := os.Stat(h.Path(path)); err == nil {
			return path
		}
		return ""
	}
	for _, d := range strings.Split(pluginDir, ":") {
		if d == "" {
			continue
		}
		p := filepath.Join(d, path)
		if _, err := os.Stat(h.Path(p)); err == nil {
			return p
		}
	}
	return ""
}
