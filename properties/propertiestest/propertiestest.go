// Package propertiestest makes property engines for tests.
package propertiestest

import (
	"testing"

	"github.com/persyst/persyst/properties"
)

// Engine is the engine of the built-in catalog and strategy with settings (none: the
// defaults).
func Engine(tb testing.TB, settings ...properties.Settings) *properties.Engine {
	tb.Helper()
	var s properties.Settings
	if len(settings) > 0 {
		s = settings[0]
	}
	e, err := properties.Load(s)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}
