package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os/user"
	"slices"
	"strings"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/sdnotify"
	"github.com/persyst/persyst/web"
)

type webOptions struct {
	db, listen, userHeader, proxies, admins, config string
	all                                             bool
}

func (o *webOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.db, "db", "/var/lib/persyst-frontend/frontend.db", "the database to show (the frontend's keeps every job's final report)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve on")
	fs.StringVar(&o.userHeader, "user-header", "", "request header in which the site's reverse proxy names the authenticated user (e.g. X-Remote-User)")
	fs.StringVar(&o.proxies, "proxy", "127.0.0.1/32,::1/128", "networks the reverse proxy connects from (only they may set --user-header)")
	fs.StringVar(&o.admins, "admins", "", "users who see every job (comma-separated), besides root and persyst.conf's AdminGroup")
	fs.BoolVar(&o.all, "all", false, "without --user-header: show every job to whoever reaches --listen")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (AdminGroup)")
}

// runWeb serves the read-only web view until ctx is done.
func runWeb(ctx context.Context, io stdio, args []string) error {
	var o webOptions
	if _, err := parseOptions("web [flags]", io, args, &o); err != nil {
		return err
	}
	conf, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	var proxies []netip.Prefix
	for _, p := range strings.Split(o.proxies, ",") {
		n, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			return usagef("--proxy %q: want networks such as 127.0.0.1/32", p)
		}
		proxies = append(proxies, n)
	}
	log, err := newLogger(io.err, "info", "web", shortHostname())
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, o.db, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	h, err := web.Handler(web.Options{Store: st, Source: o.db, UserHeader: o.userHeader, Proxies: proxies, All: o.all,
		IsAdmin: isAdmin(strings.Split(o.admins, ","), conf.AdminGroup), Log: log, Version: version})
	if err != nil {
		return usagef("web: %v", err)
	}
	addr, err := web.Serve(ctx, o.listen, h, log)
	if err != nil {
		return err
	}
	log.Info().Str("listen", addr.String()).Str("db", o.db).Msg("persyst web ready")
	fmt.Fprintf(io.err, "persyst web: http://%s/\n", addr)
	sdnotify.Serving(ctx, log)
	<-ctx.Done()
	return nil
}

// isAdmin says whether a user sees every job: root, one of admins, or a member of group.
func isAdmin(admins []string, group string) func(string) bool {
	return func(u string) bool {
		if u == "root" || slices.Contains(admins, u) {
			return true
		}
		if group == "" {
			return false
		}
		acct, err := user.Lookup(u)
		if err != nil {
			return false
		}
		gids, err := acct.GroupIds()
		if err != nil {
			return false
		}
		g, err := user.LookupGroup(group)
		if err != nil {
			if g, err = user.LookupGroupId(group); err != nil {
				return false
			}
		}
		return slices.Contains(gids, g.Gid)
	}
}
