// Hostlist expressions.
//
// ExpandHostlist and CompressHostlist convert between Slurm hostlist
// expressions ("n[1-3,07],gpu[001-004]-ib") and node names. They are written
// here rather than taken from a library; the Go libraries looked at were:
//
//   - github.com/puttsk/hostlist: expands and compresses, but passes
//     non-numeric range parts through as names ("n[a,1]" gives "na"), has no
//     limit on range size (a hostile "n[0-99999999999]" allocates until the
//     process dies), and accepts only [A-Za-z0-9._-] in names.
//   - github.com/abrekhov/hostlist: regexp based, splits lists only on ", ",
//     sorts the numbers of a group, mis-pads ("n[0-2]" gives n00 n01 n02)
//     and answers malformed input with an empty list instead of an error.
//   - github.com/go-project-pkg/expandhost: expands one name only (no
//     comma-separated list; an input without brackets panics), takes any
//     word as a "number", and a reversed range silently gives nothing.
//   - github.com/ClusterCockpit/cc-lib/hostlist: expands only, one bracket
//     group per name, [A-Za-z0-9-] only, rejects "n[08-100]" (Slurm: n08 ..
//     n100), and sorts and de-duplicates, losing the order and duplicates.
//   - github.com/ubccr/grendel (pkg/nodeset): a ClusterShell-style nodeset,
//     GPL-3.0, inside a provisioning application's module; a set (map), so
//     order and duplicates are lost, and it deletes spaces instead of
//     splitting on them.
//
// None is correct on the cases below, none has the limits hostile input
// needs, and none of these modules is even served by the module proxy this
// project builds with (it answers 403).
//
// The syntax accepted by ExpandHostlist is the one Slurm prints:
//
//   - Names are separated by ',' outside brackets, and also by spaces, tabs,
//     CR and LF (Slurm's hostlist_create splits on whitespace as well).
//   - A name may hold any number of bracket groups "[r,r,...]", each range r
//     being N or N-M in decimal. Text before, between and after the groups is
//     copied ("gpu[1-2]-ib", "rack[1-2]-n[01-02]").
//   - Several groups give the cartesian product, the rightmost group varying
//     fastest. Slurm 22.05 does the same for two groups; for three or more
//     its order is different (the last group fastest, then the first, second,
//     ...) but the set of names is the same.
//   - A range is zero-padded to the width of its first number: "n[08-11]" is
//     n08 n09 n10 n11, "n[8-011]" is n8 n9 n10 n11, as in Slurm.
//   - Order and duplicates are kept as written.
//   - Unlike Slurm, which guesses on malformed input (it expands "n[1-3" to
//     "n]", "n[1-]" to "n1" and skips empty names), every malformed input is
//     an error (*HostlistError) with the byte offset and the offending part.
//     Slurm 22.05 also rejects text after the last bracket group
//     ("gpu[1-2]-ib"); this package accepts it.
//   - At most MaxHostlistHosts names and MaxHostlistBytes bytes of names in
//     total, checked before anything is allocated, so hostile input costs
//     no more than parsing it.
//
// CompressHostlist groups names by the text around their last number
// (prefix, suffix) and by zero padding, sorts and de-duplicates them, and
// merges consecutive numbers into ranges ("n[1-3,5]", "gpu[001-004]-ib").
// Names are ordered by prefix, then suffix, then names without a number
// before names with one, then by the number's digit count, then its digits;
// for unpadded numbers this is numeric order, and it is also the order in
// which Slurm's own hostlist_ranged_string puts "n2,n01" ("n[2,01]").
// For names without a suffix the output is byte for byte what libslurm
// 22.05's hostlist_uniq + hostlist_ranged_string print (checked on
// thousands of random lists while writing this).
// ExpandHostlist(CompressHostlist(x)) is x sorted that way, without
// duplicates. Output with a suffix after the brackets ("gpu[001-004]-ib")
// is not understood by Slurm 22.05 itself.

package jobmap

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Limits that keep a hostile expression harmless.
const (
	// MaxHostlistHosts is the most names ExpandHostlist returns for one
	// expression, counted over all its parts.
	MaxHostlistHosts = 1_000_000
	// MaxHostlistBytes is the most bytes of names ExpandHostlist produces
	// for one expression (an upper bound computed before expanding).
	MaxHostlistBytes = 64 << 20
)

// The kinds of error ExpandHostlist returns, for errors.Is. The error itself
// is a *HostlistError that says where and what.
var (
	ErrUnbalancedBracket = errors.New("unbalanced bracket")
	ErrEmptyRange        = errors.New("empty range")
	ErrReversedRange     = errors.New("reversed range")
	ErrBadRange          = errors.New("malformed range")
	ErrEmptyName         = errors.New("empty host name")
	ErrHostlistTooLarge  = errors.New("hostlist too large")
)

// HostlistError is a malformed or oversized hostlist expression.
type HostlistError struct {
	Expr   string // the whole expression, as given
	Offset int    // byte offset in Expr where the problem is
	Err    error  // one of the Err* kinds above
	Detail string // what exactly is wrong, naming the offending part
}

func (e *HostlistError) Error() string {
	return "jobmap: hostlist " + quoteShort(e.Expr) + ": " + e.Detail +
		" at byte " + strconv.Itoa(e.Offset)
}

func (e *HostlistError) Unwrap() error { return e.Err }

// quoteShort quotes s for an error message, cutting it if it is long.
func quoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:max]) + "..." + "(" + strconv.Itoa(len(s)) + " bytes)"
}

// hlRange is one N or N-M of a bracket group.
type hlRange struct {
	lo, hi uint64
	width  int // digits of the range's first number, as written
}

// hlPart is a piece of one name expression: literal text, or (ranges != nil)
// a bracket group.
type hlPart struct {
	text   string
	ranges []hlRange
	count  int // names in the group
}

type hlItem struct {
	parts []hlPart
	count int // names in the item: the product of its groups' counts
}

type hlParser struct {
	expr  string
	items []hlItem
	hosts int // names so far
	bytes int // upper bound of the bytes of names so far
}

func (p *hlParser) fail(off int, kind error, detail string) error {
	return &HostlistError{Expr: p.expr, Offset: off, Err: kind, Detail: detail}
}

func hlIsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func hlIsDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseDecimal parses a non-empty run of decimal digits (leading zeros
// allowed, any number of them) into a uint64.
func parseDecimal(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !hlIsDigit(c) {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// decimalLen is the number of decimal digits of v.
func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// ExpandHostlist expands a Slurm hostlist expression into node names, in the
// order written, duplicates kept: "n[1-3,07],gpu[001-004]-ib" gives n1 n2 n3
// n07 gpu001-ib gpu002-ib gpu003-ib gpu004-ib. An expression that is empty
// or only whitespace gives no names and no error. Any malformed expression
// gives a *HostlistError (see the Err* kinds); it never panics.
func ExpandHostlist(expr string) ([]string, error) {
	p := hlParser{expr: expr}
	if err := p.parse(); err != nil {
		return nil, err
	}
	if p.hosts == 0 {
		return nil, nil
	}
	buf := make([]byte, 0, p.bytes)
	ends := make([]int, 0, p.hosts)
	for i := range p.items {
		buf, ends = expandItem(&p.items[i], buf, ends)
	}
	// One string holds every name; the names are substrings of it.
	all := string(buf)
	names := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		names[i] = all[start:end]
		start = end
	}
	return names, nil
}

func (p *hlParser) parse() error {
	s := p.expr
	fieldStart := 0    // where the current comma-separated field starts
	fieldEmpty := true // no name seen in the current field yet
	sawComma := false
	for pos := 0; pos < len(s); {
		switch c := s[pos]; {
		case c == ',':
			if fieldEmpty {
				return p.fail(fieldStart, ErrEmptyName, "empty host name before ','")
			}
			pos++
			fieldStart, fieldEmpty, sawComma = pos, true, true
		case hlIsSpace(c):
			pos++
		default:
			end, err := p.parseName(pos)
			if err != nil {
				return err
			}
			pos, fieldEmpty = end, false
		}
	}
	if sawComma && fieldEmpty {
		return p.fail(fieldStart, ErrEmptyName, "empty host name after the last ','")
	}
	return nil
}

// parseName parses one name expression starting at start and returns where
// it ends (at a separator or the end of the expression).
func (p *hlParser) parseName(start int) (int, error) {
	s := p.expr
	var item hlItem
	item.count = 1
	perName := 0 // upper bound of the bytes of one name of this item
	lit := start
	pos := start
	for pos < len(s) {
		c := s[pos]
		if c == ',' || hlIsSpace(c) {
			break
		}
		if c == ']' {
			return 0, p.fail(pos, ErrUnbalancedBracket, "']' without '['")
		}
		if c != '[' {
			pos++
			continue
		}
		if lit < pos {
			item.parts = append(item.parts, hlPart{text: s[lit:pos]})
			perName += pos - lit
		}
		closing := -1
		for k := pos + 1; k < len(s); k++ {
			if s[k] == ']' {
				closing = k
				break
			}
			if s[k] == '[' {
				return 0, p.fail(k, ErrUnbalancedBracket,
					"'[' inside brackets (opened at byte "+strconv.Itoa(pos)+")")
			}
		}
		if closing < 0 {
			return 0, p.fail(pos, ErrUnbalancedBracket, "'[' is never closed")
		}
		group, maxLen, err := p.parseGroup(pos, closing)
		if err != nil {
			return 0, err
		}
		if item.count > MaxHostlistHosts/group.count {
			return 0, p.tooMany(start)
		}
		item.count *= group.count
		perName += maxLen
		item.parts = append(item.parts, group)
		pos = closing + 1
		lit = pos
	}
	if lit < pos {
		item.parts = append(item.parts, hlPart{text: s[lit:pos]})
		perName += pos - lit
	}
	if item.count > MaxHostlistHosts-p.hosts {
		return 0, p.tooMany(start)
	}
	if perName > 0 && item.count > (MaxHostlistBytes-p.bytes)/perName {
		return 0, p.fail(start, ErrHostlistTooLarge,
			"expression expands to more than "+strconv.Itoa(MaxHostlistBytes)+" bytes of host names")
	}
	p.hosts += item.count
	p.bytes += item.count * perName
	p.items = append(p.items, item)
	return pos, nil
}

func (p *hlParser) tooMany(off int) error {
	return p.fail(off, ErrHostlistTooLarge,
		"expression expands to more than "+strconv.Itoa(MaxHostlistHosts)+" hosts")
}

// parseGroup parses the ranges between the brackets at open and closing.
// It returns the group and the most bytes one of its numbers takes.
func (p *hlParser) parseGroup(open, closing int) (hlPart, int, error) {
	s := p.expr
	if closing == open+1 {
		return hlPart{}, 0, p.fail(open, ErrEmptyRange, "empty brackets \"[]\"")
	}
	group := hlPart{ranges: make([]hlRange, 0, 1+strings.Count(s[open+1:closing], ","))}
	maxLen := 0
	for start := open + 1; start <= closing; {
		end := start
		for end < closing && s[end] != ',' {
			end++
		}
		elem := s[start:end]
		if elem == "" {
			return hlPart{}, 0, p.fail(start, ErrEmptyRange, "empty range in brackets")
		}
		loStr, hiStr, isRange := strings.Cut(elem, "-")
		lo, okLo := parseDecimal(loStr)
		hi, okHi := lo, true
		if isRange {
			hi, okHi = parseDecimal(hiStr)
		}
		if !okLo || !okHi {
			return hlPart{}, 0, p.fail(start, ErrBadRange, p.badRangeDetail(elem, loStr, hiStr, isRange))
		}
		if lo > hi {
			return hlPart{}, 0, p.fail(start, ErrReversedRange,
				"reversed range "+strconv.Quote(elem)+" (first number greater than last)")
		}
		if hi-lo >= uint64(MaxHostlistHosts) || group.count+int(hi-lo) >= MaxHostlistHosts {
			return hlPart{}, 0, p.tooMany(start)
		}
		group.count += int(hi-lo) + 1
		group.ranges = append(group.ranges, hlRange{lo: lo, hi: hi, width: len(loStr)})
		maxLen = max(maxLen, len(loStr), decimalLen(hi))
		start = end + 1
	}
	return group, maxLen, nil
}

func (p *hlParser) badRangeDetail(elem, lo, hi string, isRange bool) string {
	q := strconv.Quote(elem)
	allDigits := func(s string) bool {
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
	}
	switch {
	case lo == "" && isRange:
		return "range " + q + " has no first number"
	case isRange && hi == "":
		return "range " + q + " has no last number"
	case allDigits(lo) && (!isRange || allDigits(hi)):
		return "number too large in range " + q
	default:
		return "range " + q + " is not N or N-M with decimal numbers"
	}
}

// expandItem appends the names of item to buf, recording where each ends.
// The rightmost group varies fastest.
func expandItem(item *hlItem, buf []byte, ends []int) ([]byte, []int) {
	type cursor struct{ r, v int } // range index, offset in the range
	var cur [8]cursor
	state := cur[:0]
	for range item.parts {
		state = append(state, cursor{})
	}
	for n := 0; n < item.count; n++ {
		for i := range item.parts {
			part := &item.parts[i]
			if part.ranges == nil {
				buf = append(buf, part.text...)
				continue
			}
			r := part.ranges[state[i].r]
			buf = appendPadded(buf, r.lo+uint64(state[i].v), r.width)
		}
		ends = append(ends, len(buf))
		// Advance the odometer, rightmost group first.
		for i := len(item.parts) - 1; i >= 0; i-- {
			part := &item.parts[i]
			if part.ranges == nil {
				continue
			}
			c := &state[i]
			if r := part.ranges[c.r]; uint64(c.v) < r.hi-r.lo {
				c.v++
				break
			}
			c.v = 0
			if c.r++; c.r < len(part.ranges) {
				break
			}
			c.r = 0 // carry into the group to the left
		}
	}
	return buf, ends
}

// appendPadded appends v in decimal, zero-padded to width digits.
func appendPadded(buf []byte, v uint64, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], v, 10)
	for i := len(d); i < width; i++ {
		buf = append(buf, '0')
	}
	return append(buf, d...)
}

// hlName is a host name cut around its last number.
type hlName struct {
	name           string
	prefix, suffix string
	digits         string // the last run of digits; "" if the name has none usable
	value          uint64
}

// splitHostname cuts name around its last run of digits. A run too long for
// a uint64 does not count as a number (ExpandHostlist could not read it).
func splitHostname(name string) hlName {
	end := len(name)
	for end > 0 && !hlIsDigit(name[end-1]) {
		end--
	}
	start := end
	for start > 0 && hlIsDigit(name[start-1]) {
		start--
	}
	if start == end {
		return hlName{name: name, prefix: name}
	}
	v, ok := parseDecimal(name[start:end])
	if !ok {
		return hlName{name: name, prefix: name}
	}
	return hlName{name: name, prefix: name[:start], digits: name[start:end], suffix: name[end:], value: v}
}

// compareHostnames is the order of CompressHostlist's output: prefix, suffix,
// names without a number first, then the number's digit count, then its
// digits. Distinct names never compare equal.
func compareHostnames(a, b *hlName) int {
	if c := strings.Compare(a.prefix, b.prefix); c != 0 {
		return c
	}
	if c := strings.Compare(a.suffix, b.suffix); c != 0 {
		return c
	}
	if c := len(a.digits) - len(b.digits); c != 0 {
		return c // "" (no number) first
	}
	return strings.Compare(a.digits, b.digits)
}

// CompressHostlist is the inverse of ExpandHostlist, like
// "scontrol show hostlist": it sorts and de-duplicates names, groups them by
// the text around their last number and by zero padding, and merges
// consecutive numbers into ranges: n1,n2,n3,n5 gives "n[1-3,5]", and
// n01,n2 gives "n[2,01]". Names without a number are listed as they are.
// Empty names are dropped. Names holding ',', '[', ']' or whitespace cannot
// be written in a hostlist; they are copied as they are and the result will
// not expand back to them.
func CompressHostlist(names []string) string {
	split := make([]hlName, 0, len(names))
	for _, n := range names {
		if n != "" {
			split = append(split, splitHostname(n))
		}
	}
	// Sort pointers: swapping them is cheaper than swapping hlNames.
	hs := make([]*hlName, len(split))
	for i := range split {
		hs[i] = &split[i]
	}
	slices.SortFunc(hs, compareHostnames)
	hs = slices.CompactFunc(hs, func(a, b *hlName) bool { return a.name == b.name })

	var b strings.Builder
	for i := 0; i < len(hs); {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		h := hs[i]
		if h.digits == "" {
			b.WriteString(h.name)
			i++
			continue
		}
		j := i + 1 // hs[i:j] share prefix and suffix
		for j < len(hs) && hs[j].digits != "" && hs[j].prefix == h.prefix && hs[j].suffix == h.suffix {
			j++
		}
		if j == i+1 {
			b.WriteString(h.name)
			i = j
			continue
		}
		b.WriteString(h.prefix)
		b.WriteByte('[')
		for k := i; k < j; {
			lo := hs[k]
			width := len(lo.digits)
			end := k + 1 // hs[k:end] is one range
			for end < j && hs[end].value-1 == hs[end-1].value && hs[end].value != 0 &&
				fitsWidth(hs[end].digits, width) {
				end++
			}
			if k > i {
				b.WriteByte(',')
			}
			b.WriteString(lo.digits)
			if end-k > 1 {
				b.WriteByte('-')
				b.WriteString(hs[end-1].digits)
			}
			k = end
		}
		b.WriteByte(']')
		b.WriteString(h.suffix)
		i = j
	}
	return b.String()
}

// fitsWidth reports whether digits is how a number is written when padded to
// width: exactly width digits, or more digits without a leading zero.
func fitsWidth(digits string, width int) bool {
	return len(digits) == width || (len(digits) > width && digits[0] != '0')
}
