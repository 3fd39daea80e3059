//go:build !amd64

package main

import "errors"

// legacyOpen: architectures without open(2) (arm64) have openat only.
func legacyOpen(string, int, uint32) (int, error) {
	return -1, errors.New("no open(2) on this architecture")
}
