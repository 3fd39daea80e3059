package config

import (
	"fmt"
	"os/user"
	"strconv"
)

// LookupUID resolves a user named in the configuration (a name or a number) to its uid.
func LookupUID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	return uint32(n), nil
}

// LookupGID resolves a group named in the configuration (a name or a number) to its gid.
func LookupGID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("gid %q: %w", g.Gid, err)
	}
	return uint32(n), nil
}
