// Package schemareg is roomflow's side of a Confluent-compatible Schema
// Registry (franz-go's pkg/sr): registering the public topics' value
// schemas (`roomflow schemas register`, `roomflow topics`) and looking
// their ids up for the writers of kafka.public_wire_format confluent.
//
// A public topic's subject is <topic>-value (TopicNameStrategy) and holds
// its whole .proto file as written, so the lucky events subject holds every
// message of lucky_events.proto; a record's message indexes say which one.
// An imported file is registered under its import path and referenced by
// it, except the well-known google/protobuf/ files a registry has built in.
package schemareg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas"

	// The generated packages register the public files' descriptors.
	_ "github.com/hyapp/roomflow/schemas/activityv1"
	_ "github.com/hyapp/roomflow/schemas/userv1"
)

// Compatibility is the level every subject is set to: a consumer on any
// older schema reads what the newest writes.
const Compatibility = sr.CompatBackwardTransitive

// wellKnown prefixes the imports a registry knows built in
// (google/protobuf/timestamp.proto, ...): never registered nor referenced.
const wellKnown = "google/protobuf/"

// requestTimeout bounds one registry call (the HTTP client's timeout).
const requestTimeout = 10 * time.Second

// Subject is the value subject of topic (TopicNameStrategy).
func Subject(topic string) string { return topic + "-value" }

// Files is where the schemas come from: the descriptors (which messages a
// file holds, what it imports) and the source text a subject registers.
type Files struct {
	Descriptors interface {
		FindFileByPath(string) (protoreflect.FileDescriptor, error)
	}
	Source fs.FS // path -> the .proto text
}

// Builtin is roomflow's own schemas: the generated packages' descriptors
// and schemas/proto's sources.
func Builtin() Files {
	src, err := fs.Sub(schemas.Proto, "proto")
	if err != nil {
		panic(err) // the embedded directory exists: a build error otherwise
	}
	return Files{Descriptors: protoregistry.GlobalFiles, Source: src}
}

// Client is a registry client naming schema_registry.url in its errors.
type Client struct {
	cl    *sr.Client
	url   string // redacted: no user info
	files Files
}

// New builds a client from schema_registry (validated by config.Load):
// basic auth with the loaded password, TLS from schema_registry.tls.
// It connects to nothing yet.
func New(c config.SchemaRegistryConfig, files Files) (*Client, error) {
	if c.URL == "" {
		return nil, &cfgerr.FieldError{Key: "schema_registry.url", Msg: "must be set"}
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, &cfgerr.FieldError{Key: "schema_registry.url", Msg: "must be an http or https URL"}
	}
	// pkg/sr prints the request URL in its errors: the URL's user info
	// becomes basic auth (as net/http would make it), the URL goes without.
	user, pass := c.User, c.Password()
	if u.User != nil && user == "" {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	u.User = nil
	opts := []sr.ClientOpt{sr.URLs(u.String()), sr.UserAgent("roomflow"),
		sr.HTTPClient(&http.Client{Timeout: requestTimeout})}
	if user != "" {
		opts = append(opts, sr.BasicAuth(user, pass))
	}
	if c.TLS.Enabled() {
		tc, err := c.TLS.Files().Load()
		if err != nil {
			return nil, cfgerr.Under("schema_registry.tls", nil, err)
		}
		opts = append(opts, sr.DialTLSConfig(tc))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, &cfgerr.FieldError{Key: "schema_registry.url", Msg: err.Error()}
	}
	return &Client{cl: cl, url: u.String(), files: files}, nil
}

// IncompatibleError is a schema the registry refused for its subject (a
// 409: not BACKWARD_TRANSITIVE compatible with the versions it holds).
type IncompatibleError struct {
	Subject string
	Message string // the registry's own words
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("schema registry refused the schema of subject %s as incompatible: %s", e.Subject, e.Message)
}

// NotRegisteredError is a schema a writer looked up and the registry does
// not hold under its subject: run `roomflow schemas register` (or `roomflow
// topics`) with this release first.
type NotRegisteredError struct {
	Subject string
	Message string
}

func (e *NotRegisteredError) Error() string {
	return fmt.Sprintf("schema of subject %s is not registered (run roomflow schemas register): %s", e.Subject, e.Message)
}

// Registered is one subject as Register left it.
type Registered struct {
	Subject string
	ID      int
	Version int
}

// Register registers the Schema file of every public spec under its
// subject, the files it imports first, and sets each subject's
// compatibility to BACKWARD_TRANSITIVE before its schema goes in, so an
// incompatible change is refused (*IncompatibleError). Idempotent: an
// unchanged schema keeps its id and version.
func (c *Client) Register(ctx context.Context, specs []kafkax.TopicSpec) ([]Registered, error) {
	w := walk{c: c, done: map[string]sr.SubjectSchema{}, register: true}
	var out []Registered
	for _, s := range specs {
		if !s.Public() {
			continue
		}
		ss, err := w.schema(ctx, Subject(s.Name), s.Schema)
		if err != nil {
			return out, err
		}
		out = append(out, Registered{Subject: ss.Subject, ID: ss.ID, Version: ss.Version})
	}
	return out, nil
}

// Lookup finds the id of every public spec's schema as this release holds
// it, registering nothing: topic name -> id. A schema the registry lacks
// is a *NotRegisteredError.
func (c *Client) Lookup(ctx context.Context, specs []kafkax.TopicSpec) (map[string]int, error) {
	w := walk{c: c, done: map[string]sr.SubjectSchema{}}
	ids := map[string]int{}
	for _, s := range specs {
		if !s.Public() {
			continue
		}
		ss, err := w.schema(ctx, Subject(s.Name), s.Schema)
		if err != nil {
			return nil, err
		}
		ids[s.Name] = ss.ID
	}
	return ids, nil
}

// walk registers or looks up files depth first, each subject once.
type walk struct {
	c        *Client
	done     map[string]sr.SubjectSchema // by subject
	register bool
}

func (w *walk) schema(ctx context.Context, subject, path string) (sr.SubjectSchema, error) {
	if ss, ok := w.done[subject]; ok {
		return ss, nil
	}
	fd, err := w.c.files.Descriptors.FindFileByPath(path)
	if err != nil {
		return sr.SubjectSchema{}, fmt.Errorf("schema registry: no descriptor for %s: %w", path, err)
	}
	text, err := fs.ReadFile(w.c.files.Source, path)
	if err != nil {
		return sr.SubjectSchema{}, fmt.Errorf("schema registry: no source for %s: %w", path, err)
	}
	sch := sr.Schema{Schema: string(text), Type: sr.TypeProtobuf}
	imports := fd.Imports()
	for i := range imports.Len() {
		dep := imports.Get(i).Path()
		if strings.HasPrefix(dep, wellKnown) {
			continue // the registry's own, as Confluent's serializers leave them
		}
		ref, err := w.schema(ctx, dep, dep) // an import's subject is its path
		if err != nil {
			return sr.SubjectSchema{}, err
		}
		sch.References = append(sch.References, sr.SchemaReference{Name: dep, Subject: ref.Subject, Version: ref.Version})
	}
	var ss sr.SubjectSchema
	if w.register {
		ss, err = w.c.registerOne(ctx, subject, sch)
	} else {
		ss, err = w.c.cl.LookupSchema(ctx, subject, sch)
		err = w.c.wrap(subject, err)
	}
	if err != nil {
		return sr.SubjectSchema{}, err
	}
	ss.Subject = subject
	w.done[subject] = ss
	return ss, nil
}

func (c *Client) registerOne(ctx context.Context, subject string, sch sr.Schema) (sr.SubjectSchema, error) {
	for _, r := range c.cl.SetCompatibility(ctx, sr.SetCompatibility{Level: Compatibility}, subject) {
		if r.Err != nil {
			return sr.SubjectSchema{}, fmt.Errorf("set compatibility of %s: %w", subject, c.wrap(subject, r.Err))
		}
	}
	ss, err := c.cl.CreateSchema(ctx, subject, sch)
	return ss, c.wrap(subject, err)
}

// wrap types the registry's answer: 409 incompatible, 404 with a not-found
// code not registered, anything else (unreachable, refused login, no
// registry at the URL) naming schema_registry.url.
func (c *Client) wrap(subject string, err error) error {
	if err == nil {
		return nil
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusConflict:
			return &IncompatibleError{Subject: subject, Message: re.Error()}
		case http.StatusNotFound:
			// Only the registry's own codes mean a missing subject, version
			// or schema; a bare 404 is a server that is no registry.
			switch re.ErrorCode {
			case sr.ErrSubjectNotFound.Code, sr.ErrVersionNotFound.Code, sr.ErrSchemaNotFound.Code:
				return &NotRegisteredError{Subject: subject, Message: re.Error()}
			}
		}
		return fmt.Errorf("schema_registry.url %s: subject %s: %d %s", c.url, subject, re.StatusCode, re.Error())
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("schema_registry.url %s: unreachable: %w", c.url, err)
	}
	return fmt.Errorf("schema_registry.url %s: %w", c.url, err)
}
