package jobmap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/persyst/persyst/slurmver"
)

// The slurmrestd data parsers this package speaks, preferred first: v0.0.42 (Slurm 24.11
// to 26.05) and v0.0.38 (22.05, and 23.11 deprecated). Each has its generated client
// (jobmap/v0042, jobmap/v0038) and adapter (v0042.go, v0038.go).
const (
	APIv0042 = "v0.0.42"
	APIv0038 = "v0.0.38"
)

// dataParser is one of Slurm's data parsers persyst speaks: the form slurmrestd answers
// in and Slurm's commands print with --json. Its adapter owns the requests made with its
// generated client and the mapping of its documents to Jobs; a source chooses one once,
// when it learns what the other side speaks (RestSource.API: what the server lists;
// CLISource: the commands' release), and asks through it alone.
type dataParser interface {
	// version names the data parser as slurmrestd's paths and --json= do ("v0.0.42").
	version() string
	// inCommands says whether Slurm's commands of release rel print its JSON.
	inCommands(rel slurmver.Release) bool
	// parse reads a jobs document of the data parser, as Slurm's commands print it.
	parse(doc []byte, hosts func(string) string) ([]*Job, error)
	// getJobs asks slurmrestd for every job (id "") or for job id.
	getJobs(ctx context.Context, id string) (answer, error)
	// getNodes asks slurmrestd for the cluster's nodes.
	getNodes(ctx context.Context) ([]node, error)
}

// commandParsers are the data parsers, preferred first, as Slurm's commands are read
// with them: no client, only their documents.
var commandParsers = []dataParser{parserV0042{}, parserV0038{}}

// commandsParser is the data parser whose JSON Slurm's commands of release rel print
// (nil: none persyst reads, as from 23.02 to 24.05). A release not known is read as the
// oldest tested: v0.0.38.
func commandsParser(rel slurmver.Release) dataParser {
	for _, p := range commandParsers {
		if p.inCommands(rel) {
			return p
		}
	}
	return nil
}

// restParsers are the data parsers, preferred first, with clients of the slurmrestd at
// server (edit: the JWT headers, nil for none).
func restParsers(server string, hc *http.Client, edit func(context.Context, *http.Request) error) ([]dataParser, error) {
	p42, err := newParserV0042(server, hc, edit)
	if err != nil {
		return nil, err
	}
	p38, err := newParserV0038(server, hc, edit)
	if err != nil {
		return nil, err
	}
	return []dataParser{p42, p38}, nil
}

// answer is slurmrestd's answer to a request for jobs, of any data parser.
type answer struct {
	resp *http.Response
	body []byte
	// doc is the answer read in the data parser's form (nil: it is not in that form).
	doc jobsDoc
}

// jobsDoc is a jobs document of a data parser: the errors Slurm lists in it, and its jobs.
type jobsDoc interface {
	slurmErrors() error
	jobs(hosts func(string) string) ([]*Job, error)
}

// answerOf is the answer of a generated client's response: its HTTP response, its body and
// what the client decoded of it (json200: nil when it did not), made a jobsDoc by doc.
func answerOf[T any](resp *http.Response, body []byte, json200 *T, doc func(*T) jobsDoc) (answer, error) {
	if err := decode200(resp, body, &json200); err != nil {
		return answer{}, err
	}
	a := answer{resp: resp, body: body}
	if json200 != nil {
		a.doc = doc(json200)
	}
	return a, nil
}

// readDoc is the jobs of a document, or the errors Slurm lists in it.
func readDoc(d jobsDoc, hosts func(string) string) ([]*Job, error) {
	if err := d.slurmErrors(); err != nil {
		return nil, err
	}
	return d.jobs(hosts)
}

// decode200 parses a 200 answer whose Content-Type the generated client did not take
// for JSON (it only decodes "application/json"); *dst stays as is otherwise.
func decode200[T any](r *http.Response, body []byte, dst **T) error {
	if *dst != nil || r == nil || r.StatusCode != http.StatusOK {
		return nil
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("HTTP 200 with a body that is not the expected JSON: %w", err)
	}
	*dst = &v
	return nil
}

// convert maps each job record of a document with from; the jobs come as collected
// orders them.
func convert[R any](recs []R, from func(*R) (*Job, error)) ([]*Job, error) {
	out := make([]*Job, 0, len(recs))
	var errs []error
	for i := range recs {
		j, err := from(&recs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, j)
	}
	return collected(out, errs)
}

// listedErrors is the errors Slurm lists in a document as one error (nil: none).
func listedErrors(msgs []string) error {
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("slurm errors: %s", strings.Join(msgs, "; "))
}

// withErrno is an error's message with Slurm's error number, where it is given.
func withErrno[N int | int32](msg string, n *N) string {
	if n == nil {
		return msg
	}
	return fmt.Sprintf("%s (errno %d)", msg, *n)
}
