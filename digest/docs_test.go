package digest

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/persyst/persyst/properties"
)

// TestDocsListEveryField: docs/digest.md documents every JSON field of a report, its
// coverage and its results.
func TestDocsListEveryField(t *testing.T) {
	b, err := os.ReadFile("../docs/digest.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, typ := range []reflect.Type{reflect.TypeOf(Report{}), reflect.TypeOf(Coverage{}), reflect.TypeOf(EndState{}), reflect.TypeOf(Event{}), reflect.TypeOf(properties.Result{})} {
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(doc, "`"+name+"`") {
				t.Errorf("docs/digest.md does not document %s's field %q", typ.Name(), name)
			}
		}
	}
}
