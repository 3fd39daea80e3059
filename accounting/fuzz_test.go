package accounting

import "testing"

// FuzzDecode: a summary read from accounting (which any admin tool may have written) never
// panics the reader, and what it decodes encodes again within the bound.
func FuzzDecode(f *testing.F) {
	tok, err := Encode(report(2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok)
	f.Add(Prefix)
	f.Add("persyst:v2:x")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Decode(s, nil)
		if err != nil {
			return
		}
		if tok, err := Encode(r); err == nil && len(tok) > MaxToken {
			t.Fatalf("re-encoded to %d bytes", len(tok))
		}
	})
}
