package jobmap

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The expected outputs below that Slurm 22.05 also accepts were checked
// against libslurm 22.05.8 (slurm_hostlist_create/shift and
// slurm_hostlist_uniq/ranged_string).

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{"", nil},
		{"   \t\n", nil},
		{"n1", []string{"n1"}},
		{"login", []string{"login"}},
		{"n[1-3,07],gpu[001-004]-ib", []string{
			"n1", "n2", "n3", "n07", "gpu001-ib", "gpu002-ib", "gpu003-ib", "gpu004-ib"}},
		{"n[08-11]", []string{"n08", "n09", "n10", "n11"}},
		// Width of the range's first number, as in Slurm.
		{"n[8-011]", []string{"n8", "n9", "n10", "n11"}},
		{"n[0-02]", []string{"n0", "n1", "n2"}},
		{"n[00-2]", []string{"n00", "n01", "n02"}},
		{"n[098-101]", []string{"n098", "n099", "n100", "n101"}},
		{"n[99-101]", []string{"n99", "n100", "n101"}},
		// Each range has its own width.
		{"n[1-2,001-002]", []string{"n1", "n2", "n001", "n002"}},
		{"rack[1-2]-n[01-02]", []string{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
		{"n[1-2][3-4]", []string{"n13", "n14", "n23", "n24"}},
		// Three groups: rightmost fastest (Slurm 22.05 orders these differently).
		{"a[1-2]b[3-4]c[5-6]", []string{
			"a1b3c5", "a1b3c6", "a1b4c5", "a1b4c6", "a2b3c5", "a2b3c6", "a2b4c5", "a2b4c6"}},
		{"x[1,3]-[7]y", []string{"x1-7y", "x3-7y"}},
		{"[1-3]", []string{"1", "2", "3"}},
		{"n[3,1,2,1]", []string{"n3", "n1", "n2", "n1"}},
		{"a[1-2],a[1-2]", []string{"a1", "a2", "a1", "a2"}},
		{"n[1-1]", []string{"n1"}},
		{"n[0-0]", []string{"n0"}},
		{"n[5]", []string{"n5"}},
		// Whitespace separates names, as in Slurm.
		{"n1, n2  n3", []string{"n1", "n2", "n3"}},
		{" a\tb\nc\r\n", []string{"a", "b", "c"}},
		{"n [1-2]", []string{"n", "1", "2"}},
		{"node-1.example.com,node-2.example.com", []string{"node-1.example.com", "node-2.example.com"}},
		{"n[18446744073709551614-18446744073709551615]", []string{
			"n18446744073709551614", "n18446744073709551615"}},
		{"n[000000000000000000000000007]", []string{"n000000000000000000000000007"}},
		{"é[1-2]ü", []string{"é1ü", "é2ü"}},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := ExpandHostlist(tc.expr)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", tc.expr, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ExpandHostlist(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	tests := []struct {
		expr       string
		wantKind   error
		wantOffset int
		wantPart   string // must appear in the message
	}{
		{"n[1-3", ErrUnbalancedBracket, 1, "never closed"},
		{"n[1-3,m[1-2]", ErrUnbalancedBracket, 7, "opened at byte 1"},
		{"n1-3]", ErrUnbalancedBracket, 4, "']' without '['"},
		{"n[1-2]]", ErrUnbalancedBracket, 6, "']' without '['"},
		{"]", ErrUnbalancedBracket, 0, "']'"},
		{"[", ErrUnbalancedBracket, 0, "never closed"},
		{"n[]", ErrEmptyRange, 1, `"[]"`},
		{"a,n[]x", ErrEmptyRange, 3, `"[]"`},
		{"n[1,]", ErrEmptyRange, 4, "empty range"},
		{"n[,1]", ErrEmptyRange, 2, "empty range"},
		{"n[1,,2]", ErrEmptyRange, 4, "empty range"},
		{"n[5-3]", ErrReversedRange, 2, `"5-3"`},
		{"n[1,10-09]", ErrReversedRange, 4, `"10-09"`},
		{"n[a-b]", ErrBadRange, 2, `"a-b"`},
		{"n[1-b]", ErrBadRange, 2, `"1-b"`},
		{"n[1-]", ErrBadRange, 2, "no last number"},
		{"n[-3]", ErrBadRange, 2, "no first number"},
		{"n[1-2-3]", ErrBadRange, 2, `"1-2-3"`},
		{"n[+1]", ErrBadRange, 2, `"+1"`},
		{"n[1, 2]", ErrBadRange, 4, `" 2"`},
		{"n[0x10]", ErrBadRange, 2, `"0x10"`},
		{"n[99999999999999999999]", ErrBadRange, 2, "too large"},
		{"n[1-18446744073709551616]", ErrBadRange, 2, "too large"},
		{"a,,b", ErrEmptyName, 2, "empty host name"},
		{"a, ,b", ErrEmptyName, 2, "empty host name"},
		{",a", ErrEmptyName, 0, "empty host name"},
		{"a,", ErrEmptyName, 2, "after the last ','"},
		{",", ErrEmptyName, 0, "empty host name"},
		{"n[0-1000000]", ErrHostlistTooLarge, 2, "1000000 hosts"},
		{"n[1-500000],m[1-500001]", ErrHostlistTooLarge, 12, "1000000 hosts"},
		{"x[1-1000]y[1-1001]", ErrHostlistTooLarge, 0, "1000000 hosts"},
		{"n[0-18446744073709551615]", ErrHostlistTooLarge, 2, "hosts"},
		{"n[1-600000,1-400001]", ErrHostlistTooLarge, 11, "hosts"},
		{strings.Repeat("x", 100) + "[1-1000000]", ErrHostlistTooLarge, 0, "bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.expr[:min(len(tc.expr), 40)], func(t *testing.T) {
			got, err := ExpandHostlist(tc.expr)
			if err == nil {
				t.Fatalf("ExpandHostlist(%q) = %d names, want an error", tc.expr, len(got))
			}
			if got != nil {
				t.Errorf("ExpandHostlist(%q) returned names with an error", tc.expr)
			}
			if !errors.Is(err, tc.wantKind) {
				t.Errorf("ExpandHostlist(%q) error %q is not %q", tc.expr, err, tc.wantKind)
			}
			var he *HostlistError
			if !errors.As(err, &he) {
				t.Fatalf("ExpandHostlist(%q) error %T is not a *HostlistError", tc.expr, err)
			}
			if he.Offset != tc.wantOffset {
				t.Errorf("ExpandHostlist(%q) offset = %d, want %d (%v)", tc.expr, he.Offset, tc.wantOffset, err)
			}
			if he.Expr != tc.expr {
				t.Errorf("HostlistError.Expr = %q, want %q", he.Expr, tc.expr)
			}
			msg := err.Error()
			for _, want := range []string{tc.wantPart, "byte " + strconv.Itoa(tc.wantOffset), "jobmap: hostlist "} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
		})
	}
}

func TestHostlistErrorQuotesLongInputShort(t *testing.T) {
	expr := strings.Repeat("n1,", 10000) + "n[5-3]"
	_, err := ExpandHostlist(expr)
	if !errors.Is(err, ErrReversedRange) {
		t.Fatalf("got %v, want a reversed range", err)
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "30006 bytes") ||
		!strings.Contains(msg, `"5-3"`) || !strings.Contains(msg, "byte 30002") {
		t.Errorf("error message %q: want it short, with the length, the part and the offset", msg)
	}
}

func TestExpandHostlistAtLimit(t *testing.T) {
	got, err := ExpandHostlist("n[1-999999],m0")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxHostlistHosts {
		t.Fatalf("got %d names, want %d", len(got), MaxHostlistHosts)
	}
	want := []string{"n1", "n2", "n999999", "m0"}
	if diff := cmp.Diff(want, []string{got[0], got[1], got[999998], got[999999]}); diff != "" {
		t.Errorf("names at the limit (-want +got):\n%s", diff)
	}
	if _, err := ExpandHostlist("n[1-999999],m0,m1"); !errors.Is(err, ErrHostlistTooLarge) {
		t.Errorf("one past the limit: got %v, want %v", err, ErrHostlistTooLarge)
	}
}

func TestCompressHostlist(t *testing.T) {
	tests := []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{""}, ""},
		{[]string{"n1"}, "n1"},
		{[]string{"n1", "n2", "n3", "n5"}, "n[1-3,5]"},
		{[]string{"n5", "n3", "n1", "n2", "n3"}, "n[1-3,5]"},
		{[]string{"n01", "n2"}, "n[2,01]"},
		{[]string{"n08", "n09", "n10", "n11"}, "n[08-11]"},
		{[]string{"n8", "n9", "n10", "n11"}, "n[8-11]"},
		{[]string{"n8", "n08", "n9", "n09", "n10"}, "n[8-9,08-10]"},
		{[]string{"n098", "n099", "n100"}, "n[098-100]"},
		{[]string{"n10", "n9", "n8", "n1", "n01"}, "n[1,8-9,01,10]"},
		{[]string{"n0", "n00", "n000", "n1"}, "n[0-1,00,000]"},
		{[]string{"gpu001-ib", "gpu002-ib", "gpu004-ib"}, "gpu[001-002,004]-ib"},
		{[]string{"gpu1", "gpu2-ib", "gpu1-ib"}, "gpu1,gpu[1-2]-ib"},
		{[]string{"rack1-n01", "rack1-n02", "rack2-n01"}, "rack1-n[01-02],rack2-n01"},
		{[]string{"b", "a", "n10", "n9", "n1", "m"}, "a,b,m,n[1,9-10]"},
		{[]string{"x", "y1", "y", "1", "2", "3"}, "[1-3],x,y,y1"},
		{[]string{"login", "login"}, "login"},
		{[]string{"n18446744073709551614", "n18446744073709551615"}, "n[18446744073709551614-18446744073709551615]"},
		// A number too long for Expand to read is not a number.
		{[]string{"n99999999999999999999", "n1"}, "n1,n99999999999999999999"},
		{[]string{"n2", "", "n1"}, "n[1-2]"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			got := CompressHostlist(tc.names)
			if got != tc.want {
				t.Errorf("CompressHostlist(%q) = %q, want %q", tc.names, got, tc.want)
			}
			back, err := ExpandHostlist(got)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", got, err)
			}
			if diff := cmp.Diff(refSortedUnique(tc.names), back); diff != "" {
				t.Errorf("ExpandHostlist(CompressHostlist(%q)) (-want +got):\n%s", tc.names, diff)
			}
		})
	}
}

func TestCompressHostlistDoesNotModifyInput(t *testing.T) {
	in := []string{"n3", "n1", "n2", "n1"}
	CompressHostlist(in)
	if diff := cmp.Diff([]string{"n3", "n1", "n2", "n1"}, in); diff != "" {
		t.Errorf("input changed (-want +got):\n%s", diff)
	}
}

// hlRefName cuts a name at its last run of digits, independently of
// splitHostname.
var hlRefName = regexp.MustCompile(`^(.*[^0-9]|)([0-9]+)([^0-9]*)$`)

// refSortedUnique is the order CompressHostlist promises, written
// independently: prefix, suffix, names without a (uint64) number first, then
// digit count, then digits; duplicates and empty names dropped.
func refSortedUnique(names []string) []string {
	type key struct{ name, prefix, suffix, digits string }
	var keys []key
	for _, n := range names {
		if n == "" {
			continue
		}
		k := key{name: n, prefix: n}
		if m := hlRefName.FindStringSubmatch(n); m != nil {
			if _, err := strconv.ParseUint(m[2], 10, 64); err == nil {
				k = key{name: n, prefix: m[1], digits: m[2], suffix: m[3]}
			}
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		if c := strings.Compare(a.suffix, b.suffix); c != 0 {
			return c
		}
		if len(a.digits) != len(b.digits) {
			return len(a.digits) - len(b.digits)
		}
		return strings.Compare(a.digits, b.digits)
	})
	var out []string
	for i, k := range keys {
		if i == 0 || k.name != keys[i-1].name {
			out = append(out, k.name)
		}
	}
	return out
}

// randomHostnames makes a list with the awkward cases mixed in: shared
// prefixes, suffixes, several widths, 9/10 and 99/100 boundaries, numbers
// in the prefix, names without numbers, duplicates.
func randomHostnames(r *rand.Rand, n int) []string {
	prefixes := []string{"n", "node", "gpu", "rack1-n", "rack12-n", "r1c", "", "a-b."}
	suffixes := []string{"", "", "", "-ib", ".local", "x"}
	var names []string
	for len(names) < n {
		switch r.IntN(10) {
		case 0:
			names = append(names, []string{"login", "head", "gpu", "n"}[r.IntN(4)])
		case 1:
			if len(names) > 0 { // duplicate
				names = append(names, names[r.IntN(len(names))])
			}
		default:
			pre := prefixes[r.IntN(len(prefixes))]
			suf := suffixes[r.IntN(len(suffixes))]
			width := []int{0, 0, 1, 2, 3, 4}[r.IntN(6)]
			base := []int{0, 7, 95, 995, r.IntN(200)}[r.IntN(5)]
			run := 1 + r.IntN(12) // a run of consecutive numbers
			for v := base; v < base+run && len(names) < n; v++ {
				names = append(names, fmt.Sprintf("%s%0*d%s", pre, width, v, suf))
			}
		}
	}
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names
}

func TestCompressHostlistRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(20250101, 4))
	for i := 0; i < 2000; i++ {
		names := randomHostnames(r, 1+r.IntN(60))
		compressed := CompressHostlist(names)
		got, err := ExpandHostlist(compressed)
		if err != nil {
			t.Fatalf("ExpandHostlist(CompressHostlist(%q)) = %q: %v", names, compressed, err)
		}
		if diff := cmp.Diff(refSortedUnique(names), got); diff != "" {
			t.Fatalf("ExpandHostlist(%q) for %q (-want +got):\n%s", compressed, names, diff)
		}
		if again := CompressHostlist(got); again != compressed {
			t.Fatalf("CompressHostlist not stable: %q, then %q", compressed, again)
		}
	}
}

func TestCompressHostlistMergesRuns(t *testing.T) {
	// Every consecutive, equally padded run must become one range.
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 200; i++ {
		lo := r.IntN(100000)
		n := 2 + r.IntN(500)
		width := r.IntN(7)
		names := make([]string, n)
		for k := range names {
			names[k] = fmt.Sprintf("cn%0*d", width, lo+k)
		}
		r.Shuffle(n, func(a, b int) { names[a], names[b] = names[b], names[a] })
		want := fmt.Sprintf("cn[%0*d-%0*d]", width, lo, width, lo+n-1)
		if got := CompressHostlist(names); got != want {
			t.Fatalf("CompressHostlist(cn%0*d..cn%0*d) = %q, want %q", width, lo, width, lo+n-1, got, want)
		}
	}
}

// hlBenchMessy is a 1,000-part list of the kind squeue prints for a busy,
// fragmented cluster, plus the odd padded, suffixed and plain name.
func hlBenchMessy() string {
	r := rand.New(rand.NewPCG(1, 1000))
	parts := make([]string, 0, 1000)
	for len(parts) < 1000 {
		switch r.IntN(6) {
		case 0:
			parts = append(parts, fmt.Sprintf("login%d", r.IntN(4)))
		case 1:
			parts = append(parts, fmt.Sprintf("gpu[%03d-%03d,%03d]-ib", r.IntN(50), 50+r.IntN(50), 100+r.IntN(100)))
		case 2:
			parts = append(parts, fmt.Sprintf("rack%d-n[%02d-%02d]", r.IntN(40), r.IntN(10), 10+r.IntN(20)))
		default:
			lo := r.IntN(9000)
			parts = append(parts, fmt.Sprintf("n[%05d-%05d,%05d,%d]", lo, lo+r.IntN(30), lo+40+r.IntN(10), lo+60))
		}
	}
	return strings.Join(parts, ",")
}

func BenchmarkExpandHostlist(b *testing.B) {
	for _, bc := range []struct{ name, expr string }{
		{"range-10000", "n[00001-10000]"},
		{"messy-1000-parts", hlBenchMessy()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			names, err := ExpandHostlist(bc.expr)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ExpandHostlist(bc.expr); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(names)), "hosts/op")
		})
	}
}

func BenchmarkCompressHostlist(b *testing.B) {
	for _, bc := range []struct{ name, expr string }{
		{"range-10000", "n[00001-10000]"},
		{"messy-1000-parts", hlBenchMessy()},
	} {
		names, err := ExpandHostlist(bc.expr)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				CompressHostlist(names)
			}
			b.ReportMetric(float64(len(names)), "hosts/op")
		})
	}
}
