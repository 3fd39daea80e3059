package store

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// The store's queries are written once, in SQLite's SQL. For MariaDB (and MySQL) they are
// rewritten by mysqlRewrite where the two spell the same thing differently; what no
// rewrite can tell (integer division, the catalog, sizes) is a dialect's own method.
// The rewrite is syntactic and exact for the forms the store uses; TestMySQLRewrite
// lists them, and the store's whole test suite runs on MariaDB.
//
// The MariaDB session runs with sql_mode ANSI_QUOTES (a double-quoted name is an
// identifier, as in SQLite) and PIPES_AS_CONCAT (|| joins strings), so neither is
// rewritten.
//
//	?NNN (SQLite's numbered parameters)  ?, with the arguments in the order used
//	key, partition, schema (names)       "key", "partition", "schema" (reserved words)
//	INSERT OR IGNORE                     INSERT IGNORE
//	ON CONFLICT ... DO NOTHING           INSERT IGNORE
//	ON CONFLICT (k) DO UPDATE SET        ON DUPLICATE KEY UPDATE (qualify)
//	excluded.c                           VALUES(c)
//	max(a, b), min(a, b) (scalar)        GREATEST(a, b), LEAST(a, b)
//	json_group_object(k, v)              JSON_OBJECTAGG(k, v)
//	t INDEXED BY i                       t FORCE INDEX (i)
//	3600.0 (a decimal number)            3600.0e0: SQLite's is a REAL, MariaDB's an exact
//	                                     DECIMAL that divides to 4 more digits only

// args orders a call's arguments for the query, and where the database has no infinite
// numbers (finite), writes ±Inf as ±math.MaxFloat64 (finite reads them back as ±Inf).
func (q rewritten) args(args []any) ([]any, error) {
	out := args
	if q.order != nil {
		out = make([]any, len(q.order))
		for i, a := range q.order {
			if a >= len(args) {
				return nil, fmt.Errorf("store: query wants argument %d, given %d", a+1, len(args))
			}
			out[i] = args[a]
		}
	}
	if !q.finite {
		return out, nil
	}
	copied := q.order != nil
	for i, a := range out {
		if f, ok := a.(float64); ok && math.IsInf(f, 0) {
			if !copied {
				out, copied = append([]any(nil), out...), true
			}
			out[i] = math.Copysign(math.MaxFloat64, f)
		}
	}
	return out, nil
}

// finite reads a number written by args: ±math.MaxFloat64 is ±Inf (no sum of measured
// values reaches it).
func finite(v float64) float64 {
	if math.Abs(v) == math.MaxFloat64 {
		return math.Inf(int(math.Copysign(1, v)))
	}
	return v
}

// mysqlReserved are the store's names that MariaDB reserves.
var mysqlReserved = map[string]bool{"key": true, "partition": true, "schema": true}

type tokKind int

const (
	tokSpace  tokKind = iota
	tokWord           // a name or keyword
	tokString         // '...'
	tokIdent          // "..." or `...`
	tokParam          // ? or ?NNN
	tokNumber
	tokPunct
)

type token struct {
	kind tokKind
	text string
}

// lexSQL cuts q into tokens; comments are spaces.
func lexSQL(q string) ([]token, error) {
	var out []token
	for i := 0; i < len(q); {
		c := q[i]
		start := i
		switch {
		case c == '-' && strings.HasPrefix(q[i:], "--"):
			for i < len(q) && q[i] != '\n' {
				i++
			}
			out = append(out, token{tokSpace, " "})
			continue
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("unterminated comment at byte %d", i)
			}
			i += end + 4
			out = append(out, token{tokSpace, " "})
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			for i < len(q) && (q[i] == ' ' || q[i] == '\t' || q[i] == '\n' || q[i] == '\r') {
				i++
			}
			out = append(out, token{tokSpace, q[start:i]})
			continue
		case c == '\'' || c == '"' || c == '`':
			var err error
			if i, err = quoted(q, i); err != nil {
				return nil, err
			}
			k := tokIdent
			if c == '\'' {
				k = tokString
			}
			out = append(out, token{k, q[start:i]})
			continue
		case c == '?':
			i++
			for i < len(q) && q[i] >= '0' && q[i] <= '9' {
				i++
			}
			out = append(out, token{tokParam, q[start:i]})
			continue
		case c == '_' || unicode.IsLetter(rune(c)):
			for i < len(q) && (q[i] == '_' || q[i] == '$' || unicode.IsLetter(rune(q[i])) || unicode.IsDigit(rune(q[i]))) {
				i++
			}
			out = append(out, token{tokWord, q[start:i]})
			continue
		case c >= '0' && c <= '9':
			i = number(q, i)
			out = append(out, token{tokNumber, q[start:i]})
			continue
		}
		i++
		out = append(out, token{tokPunct, q[start:i]})
	}
	return out, nil
}

// quoted returns the end of the quoted string or name that starts at i (a doubled quote
// is the quote itself).
func quoted(q string, i int) (int, error) {
	c, start := q[i], i
	for i++; ; i++ {
		if i >= len(q) {
			return 0, fmt.Errorf("unterminated %c at byte %d", c, start)
		}
		if q[i] != c {
			continue
		}
		if i+1 < len(q) && q[i+1] == c {
			i++
			continue
		}
		return i + 1, nil
	}
}

// number returns the end of the number that starts at i (digits, a point, an exponent).
func number(q string, i int) int {
	for i < len(q) {
		switch d := q[i]; {
		case d >= '0' && d <= '9' || d == '.':
			i++
		case d == 'e' || d == 'E':
			i++
			if i < len(q) && (q[i] == '+' || q[i] == '-') {
				i++
			}
		default:
			return i
		}
	}
	return i
}

// next returns the index of the first token at or after i that is not a space (len(ts)
// if none).
func next(ts []token, i int) int {
	for i < len(ts) && ts[i].kind == tokSpace {
		i++
	}
	return i
}

// prev returns the index of the last token before i that is not a space (-1 if none).
func prev(ts []token, i int) int {
	i--
	for i >= 0 && ts[i].kind == tokSpace {
		i--
	}
	return i
}

// closing returns the index of the ')' that closes the '(' at i, and whether a comma
// lies between them at their own depth.
func closing(ts []token, i int) (int, bool, error) {
	depth, comma := 0, false
	for j := i; j < len(ts); j++ {
		switch ts[j].text {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return j, comma, nil
			}
		case ",":
			if depth == 1 && ts[j].kind == tokPunct {
				comma = true
			}
		}
	}
	return 0, false, fmt.Errorf("unbalanced parenthesis at token %d", i)
}

// follows says whether token i comes right after s (spaces aside); precedes, whether s
// comes right after it.
func follows(ts []token, i int, s string) bool {
	p := prev(ts, i)
	return p >= 0 && ts[p].text == s
}

func precedes(ts []token, i int, s string) bool {
	n := next(ts, i+1)
	return n < len(ts) && ts[n].text == s
}

func isWord(t token, w string) bool { return t.kind == tokWord && strings.EqualFold(t.text, w) }

// mysqlRewrite rewrites one SQLite statement for MariaDB (see above).
func mysqlRewrite(q string) (rewritten, error) {
	ts, err := lexSQL(q)
	if err != nil {
		return rewritten{}, fmt.Errorf("store: %w in %q", err, q)
	}
	out := rewritten{finite: true}
	if err := out.params(ts); err != nil {
		return rewritten{}, fmt.Errorf("store: %w in %q", err, q)
	}
	if err := upsert(ts); err != nil {
		return rewritten{}, fmt.Errorf("store: %w in %q", err, q)
	}
	for i, t := range ts {
		if t.kind == tokNumber && strings.Contains(t.text, ".") && !strings.ContainsAny(t.text, "eE") {
			ts[i].text += "e0" // a DOUBLE, as SQLite's REAL; 3600.0 would be an exact DECIMAL
		}
		if t.kind != tokWord {
			continue
		}
		switch {
		case t.text == "excluded" && i+2 < len(ts) && ts[i+1].text == "." && ts[i+2].kind == tokWord:
			ts[i].text, ts[i+1].text, ts[i+2].text = "", "VALUES(", quoteName(ts[i+2].text)+")"
		case mysqlReserved[t.text]:
			ts[i].text = `"` + t.text + `"`
		case t.text == "json_group_object" && precedes(ts, i, "("):
			ts[i].text = "JSON_OBJECTAGG"
		case t.text == "INDEXED" && precedes(ts, i, "BY"):
			// INDEXED BY name: FORCE INDEX (name), in the same place.
			by := next(ts, i+1)
			name := next(ts, by+1)
			if name >= len(ts) || ts[name].kind != tokWord {
				return rewritten{}, fmt.Errorf("store: INDEXED BY without an index in %q", q)
			}
			ts[i].text, ts[by].text, ts[name].text = "FORCE", "INDEX", "("+ts[name].text+")"
		case t.text == "max" || t.text == "min":
			j := next(ts, i+1)
			if j >= len(ts) || ts[j].text != "(" {
				continue
			}
			if _, comma, err := closing(ts, j); err != nil {
				return rewritten{}, fmt.Errorf("store: %w in %q", err, q)
			} else if comma {
				ts[i].text = map[string]string{"max": "GREATEST", "min": "LEAST"}[t.text]
			}
		}
	}
	var b strings.Builder
	for _, t := range ts {
		b.WriteString(t.text)
	}
	out.text = b.String()
	return out, nil
}

func quoteName(n string) string {
	if mysqlReserved[n] {
		return `"` + n + `"`
	}
	return n
}

// params turns ?NNN into ? and records the order of the arguments; plain ? takes the
// argument after the last one taken, as in SQLite.
func (q *rewritten) params(ts []token) error {
	numbered, last := false, -1
	var order []int
	for i, t := range ts {
		if t.kind != tokParam {
			continue
		}
		a := last + 1
		if len(t.text) > 1 {
			n, err := strconv.Atoi(t.text[1:])
			if err != nil || n < 1 || n > 999 {
				return fmt.Errorf("parameter %s", t.text)
			}
			a, numbered = n-1, true
			ts[i].text = "?"
		}
		order = append(order, a)
		last = max(last, a)
	}
	if numbered {
		q.order = order
	}
	return nil
}

// upsert rewrites SQLite's INSERT OR IGNORE and ON CONFLICT clauses.
func upsert(ts []token) error {
	ins := next(ts, 0)
	if ins >= len(ts) || !isWord(ts[ins], "INSERT") {
		return nil
	}
	or := next(ts, ins+1)
	if or < len(ts) && isWord(ts[or], "OR") {
		if ig := next(ts, or+1); ig < len(ts) && isWord(ts[ig], "IGNORE") {
			ts[or].text = ""
			ts[or+1].text = "" // the space after OR
			return nil
		}
		return fmt.Errorf("INSERT OR %s has no MariaDB form", ts[next(ts, or+1)].text)
	}
	into := next(ts, ins+1)
	table := ""
	if into < len(ts) && isWord(ts[into], "INTO") {
		if t := next(ts, into+1); t < len(ts) {
			table = ts[t].text
		}
	}
	on := -1
	depth := 0
	for i, t := range ts {
		switch {
		case t.text == "(":
			depth++
		case t.text == ")":
			depth--
		case depth == 0 && isWord(t, "ON"):
			if c := next(ts, i+1); c < len(ts) && isWord(ts[c], "CONFLICT") {
				on = i
			}
		}
		if on >= 0 {
			break
		}
	}
	if on < 0 {
		return nil
	}
	// ON CONFLICT [(cols)] DO NOTHING | DO UPDATE SET ...
	i := next(ts, next(ts, on+1)+1)
	if i < len(ts) && ts[i].text == "(" {
		end, _, err := closing(ts, i)
		if err != nil {
			return err
		}
		i = next(ts, end+1)
	}
	if i >= len(ts) || !isWord(ts[i], "DO") {
		return fmt.Errorf("ON CONFLICT without DO")
	}
	act := next(ts, i+1)
	switch {
	case act < len(ts) && isWord(ts[act], "NOTHING"):
		for j := on; j <= act; j++ {
			ts[j].text = ""
		}
		ts[ins].text = "INSERT IGNORE"
		return nil
	case act < len(ts) && isWord(ts[act], "UPDATE"):
		set := next(ts, act+1)
		if set >= len(ts) || !isWord(ts[set], "SET") {
			return fmt.Errorf("ON CONFLICT DO UPDATE without SET")
		}
		for j := on; j <= set; j++ {
			ts[j].text = ""
		}
		ts[on].text = "ON DUPLICATE KEY UPDATE"
		qualify(ts, set+1, table)
		return nil
	}
	return fmt.Errorf("ON CONFLICT DO %s has no MariaDB form", ts[act].text)
}

// qualify names the table inserted into before each bare column of an upsert's
// assignments from token i on (in INSERT ... SELECT, MariaDB would find a bare name
// ambiguous with the SELECT's tables), and drops a trailing WHERE (it only spares
// unchanged writes).
func qualify(ts []token, i int, table string) {
	depth := 0
	for j := i; j < len(ts); j++ {
		t := ts[j]
		switch {
		case t.text == "(":
			depth++
		case t.text == ")":
			depth--
		case depth == 0 && isWord(t, "WHERE"):
			for k := j; k < len(ts); k++ {
				ts[k].text = ""
			}
			return
		case t.kind == tokWord && table != "" && t.text != "excluded" && isName(t.text) &&
			!follows(ts, j, ".") && (j+1 >= len(ts) || ts[j+1].text != ".") && !precedes(ts, j, "("):
			ts[j].text = table + "." + quoteName(t.text)
		}
	}
}

// isName says whether a word is a name, not a keyword: the store writes keywords in
// capitals and names in small letters.
func isName(w string) bool {
	return w == strings.ToLower(w)
}
