package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/accounting"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/target"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/internal/ratelog"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/sdnotify"
	"github.com/persyst/persyst/web"
)

type webOptions struct {
	db, listen, userHeader, proxyUsers, socketGroup, webConfig, proxies, admins, config string
	coordinators                                                                        string
	all                                                                                 bool
}

func (o *webOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.db, "db", "", "the site's store to show: a SQLite file or mysql://USER@HOST/DATABASE?password-file=PATH (default: persyst.conf's SiteStore)")
	fs.StringVar(&o.listen, "listen", "unix:/run/persyst-web/web.sock", "where to serve: unix:PATH (only --proxy-user's processes and root are served there), systemd (the socket of persyst-web.socket), or HOST:PORT (needs --web-config-file)")
	fs.StringVar(&o.userHeader, "user-header", "", "request header in which the site's reverse proxy names the authenticated user (e.g. X-Remote-User)")
	fs.StringVar(&o.proxyUsers, "proxy-user", "www-data", "the reverse proxy's users (comma-separated names or uids): on the unix socket only their processes (and root) may name a user")
	fs.StringVar(&o.socketGroup, "socket-group", "", "group of the unix socket made for --listen unix:PATH, mode 0660 (default: the first proxy user's group)")
	fs.StringVar(&o.webConfig, "web-config-file", "", "for a TCP --listen: the web configuration file with which the proxy proves itself (client certificates or basic auth; the exporter toolkit's format, as persyst.conf's MetricsWebConfig)")
	fs.StringVar(&o.proxies, "proxy", "127.0.0.1/32,::1/128", "for a TCP --listen: networks the reverse proxy connects from")
	fs.StringVar(&o.admins, "admins", "", "users who see every job (comma-separated), besides root and persyst.conf's AdminGroup")
	fs.StringVar(&o.coordinators, "coordinators", "sacctmgr", "who sees their accounts' jobs and figures: sacctmgr (the accounts' coordinators in Slurm's accounting, read every 5 minutes) or none")
	fs.BoolVar(&o.all, "all", false, "without --user-header: show every job, to root on the unix socket only")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (SiteStore, AdminGroup)")
}

// runWeb serves the read-only web view until ctx is done.
func runWeb(ctx context.Context, io stdio, args []string) error {
	var o webOptions
	fs, err := parseOptions("web [flags]", io, args, &o)
	if err != nil {
		return err
	}
	conf, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	o.db = siteStore(fs, o.db, conf)
	proxies, err := webProxies(o.proxies)
	if err != nil {
		return err
	}
	uids, group, err := proxyUsers(o.proxyUsers, o.socketGroup)
	if err != nil {
		return err
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
	wo := web.Options{Store: st, Source: target.Describe(o.db), UserHeader: o.userHeader, ProxyUIDs: uids, Proxies: proxies, All: o.all,
		IsAdmin: isAdmin(strings.Split(o.admins, ","), conf.AdminGroup), Log: log, Version: version}
	if wo.Coordinated, err = coordinated(o.coordinators, log); err != nil {
		return err
	}
	where := web.ListenOptions{Addr: o.listen, Group: group, WebConfig: o.webConfig}
	h, err := web.Handler(wo)
	if err == nil {
		err = web.Check(wo, where)
	}
	if err != nil {
		return usagef("web: %v", err)
	}
	ln, err := web.Listen(ctx, where)
	if err != nil {
		return err
	}
	web.Serve(ctx, ln, h, log)
	log.Info().Str("listen", o.listen).Str("address", ln.Addr().String()).Str("db", target.Describe(o.db)).Msg("persyst web ready")
	fmt.Fprintf(io.err, "persyst web: serving on %s\n", ln.Addr())
	defer sdnotify.Serving(ctx, log)()
	<-ctx.Done()
	return nil
}

// webProxies parses --proxy.
func webProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range strings.Split(list, ",") {
		n, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			return nil, usagef("--proxy %q: want networks such as 127.0.0.1/32", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// proxyUsers resolves --proxy-user to uids, and the unix socket's group: --socket-group,
// else the first proxy user's primary group.
func proxyUsers(list, group string) ([]uint32, string, error) {
	var uids []uint32
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		uid, err := config.LookupUID(name)
		if err != nil {
			return nil, "", usagef("--proxy-user %q: %v: name the reverse proxy's user", name, err)
		}
		uids = append(uids, uid)
		if group == "" {
			if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
				group = u.Gid
			}
		}
	}
	return uids, group, nil
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

// coordinated is how the web view learns the accounts a user coordinates (--coordinators):
// from sacctmgr, read at most every 5 minutes, or not at all.
func coordinated(how string, log zerolog.Logger) (func(context.Context, string) []string, error) {
	switch how {
	case "none":
		return nil, nil
	case "sacctmgr":
		cache := accounting.NewCoordinatorCache(accounting.Runner(jobmap.ExecRunner), 5*time.Minute, nil)
		failed := ratelog.New(log, 10*time.Minute, nil)
		return func(ctx context.Context, u string) []string {
			accounts, err := cache.Accounts(ctx, u)
			if err != nil {
				failed.Warn().Err(err).Msg("web: the accounts' coordinators are not known: they see their own jobs only (at most one line in 10 minutes)")
			}
			return accounts
		}, nil
	}
	return nil, usagef("web: --coordinators %q: want sacctmgr or none", how)
}
