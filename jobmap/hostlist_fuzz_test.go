package jobmap

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzExpandHostlist checks that ExpandHostlist never panics, that its
// errors are *HostlistError with an offset inside the input and a known
// kind, and that every expansion compresses and expands back to the same
// names, sorted and de-duplicated.
func FuzzExpandHostlist(f *testing.F) {
	for _, seed := range []string{
		"", " ", "n1", "n[1-3,07],gpu[001-004]-ib", "rack[1-2]-n[01-02]",
		"n[08-11]", "n[8-011]", "n[098-101]", "a[1-2]b[3-4]c[5-6]", "[1-3]",
		"n[3,1,2,1]", "a[1-2],a[1-2]", "n1, n2\tn3\n", "n[0-0]", "n[00-2]",
		"n[18446744073709551614-18446744073709551615]", "n[000000000000000000000000007]",
		"n[1-2][3-4]", "x[1,3]-[7]y", "n[2,01]", "n[8-9,08-10]", "n[0-1,00,000]",
		// malformed
		"n[1-3", "n1-3]", "n[]", "n[5-3]", "n[a-b]", "n[1-]", "n[-3]", "n[1,]",
		"a,,b", ",", "a,", "n[[1]]", "n[1-2]]", "n[99999999999999999999]",
		"n[0-1000000]", "x[1-1000]y[1-1001]", "n[1, 2]", "n[+1]",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		names, err := ExpandHostlist(expr)
		if err != nil {
			var he *HostlistError
			if !errors.As(err, &he) {
				t.Fatalf("ExpandHostlist(%q): error %T %v is not a *HostlistError", expr, err, err)
			}
			if he.Offset < 0 || he.Offset > len(expr) {
				t.Fatalf("ExpandHostlist(%q): offset %d outside the input", expr, he.Offset)
			}
			known := false
			for _, kind := range []error{ErrUnbalancedBracket, ErrEmptyRange, ErrReversedRange,
				ErrBadRange, ErrEmptyName, ErrHostlistTooLarge} {
				known = known || errors.Is(err, kind)
			}
			if !known {
				t.Fatalf("ExpandHostlist(%q): error %v of no known kind", expr, err)
			}
			if names != nil {
				t.Fatalf("ExpandHostlist(%q): names with an error", expr)
			}
			return
		}
		if len(names) > MaxHostlistHosts {
			t.Fatalf("ExpandHostlist(%q): %d names, more than the limit", expr, len(names))
		}
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "[], \t\r\n") {
				t.Fatalf("ExpandHostlist(%q): bad name %q", expr, n)
			}
		}
		if len(names) > 200_000 {
			return // keep the fuzzer fast; big inputs are covered by the tests
		}
		compressed := CompressHostlist(names)
		again, err := ExpandHostlist(compressed)
		if err != nil {
			t.Fatalf("ExpandHostlist(CompressHostlist(ExpandHostlist(%q))) = ExpandHostlist(%q): %v", expr, compressed, err)
		}
		if diff := cmp.Diff(refSortedUnique(names), again); diff != "" {
			t.Fatalf("round trip of %q through %q (-want +got):\n%s", expr, compressed, diff)
		}
		if c2 := CompressHostlist(again); c2 != compressed {
			t.Fatalf("CompressHostlist not stable for %q: %q then %q", expr, compressed, c2)
		}
	})
}
