package schemareg_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/internal/schemareg/srtest"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// registries are the registries a test runs against: srfake always, and a
// real one when ROOMFLOW_TEST_SCHEMA_REGISTRY_URL names it (its topics
// prefixed per run, so runs never meet).
func registries(t *testing.T) map[string]string {
	fake := srfake.New()
	t.Cleanup(fake.Close)
	out := map[string]string{"srfake": fake.URL()}
	if u := os.Getenv("ROOMFLOW_TEST_SCHEMA_REGISTRY_URL"); u != "" {
		out["real"] = u
	}
	return out
}

func client(t *testing.T, url string, files schemareg.Files) *schemareg.Client {
	t.Helper()
	cl, err := schemareg.New(config.SchemaRegistryConfig{URL: url}, files)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func publicTopics(prefix string) []kafkax.TopicSpec {
	return config.Default().Kafka.Topics.WithPrefix(prefix).Public()
}

// Register puts every public topic's file under <topic>-value at
// BACKWARD_TRANSITIVE, is idempotent, and the ids a writer looks up (a
// fresh client: a restarted writer) are the registered ones. The lucky
// events subject holds every message of lucky_events.proto.
func TestRegisterIdempotentAndLookup(t *testing.T) {
	for name, url := range registries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := fmt.Sprintf("t%d.", time.Now().UnixNano())
			specs := publicTopics(prefix)
			if len(specs) < 5 {
				t.Fatalf("public topics: %d, want at least the five of the design", len(specs))
			}
			first, err := client(t, url, schemareg.Builtin()).Register(ctx, config.Default().Kafka.Topics.WithPrefix(prefix).List())
			if err != nil {
				t.Fatal(err)
			}
			if len(first) != len(specs) {
				t.Fatalf("registered %d subjects, want %d (one per public topic, none for the internal ones): %+v", len(first), len(specs), first)
			}
			again, err := client(t, url, schemareg.Builtin()).Register(ctx, specs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range first {
				if first[i] != again[i] {
					t.Errorf("second register changed %+v to %+v", first[i], again[i])
				}
			}
			ids, err := client(t, url, schemareg.Builtin()).Lookup(ctx, specs)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := sr.NewClient(sr.URLs(url))
			for i, s := range specs {
				sub := schemareg.Subject(s.Name)
				if first[i].Subject != sub || ids[s.Name] != first[i].ID {
					t.Errorf("%s: registered %+v, looked up id %d", sub, first[i], ids[s.Name])
				}
				for _, c := range raw.Compatibility(ctx, sub) {
					if c.Err != nil || c.Level != sr.CompatBackwardTransitive {
						t.Errorf("%s: compatibility %v (%v), want BACKWARD_TRANSITIVE", sub, c.Level, c.Err)
					}
				}
			}
			lucky := prefix + config.Default().Kafka.Topics.LuckyEvents
			text, err := raw.SchemaTextByID(ctx, ids[lucky])
			if err != nil {
				t.Fatal(err)
			}
			fd, _ := protoregistry.GlobalFiles.FindFileByPath("hyapp/activity/v1/lucky_events.proto")
			for i := range fd.Messages().Len() {
				if m := fd.Messages().Get(i).Name(); !strings.Contains(text, "message "+string(m)) {
					t.Errorf("%s-value lacks message %s", lucky, m)
				}
			}
		})
	}
}

// A 409 from the registry (an incompatible schema) is refused naming the
// subject and passing the registry's message on.
func TestRegisterIncompatible(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	specs := publicTopics("")
	subject := schemareg.Subject(specs[1].Name)
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/subjects/"+subject+"/versions" {
			return false
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error_code":409,"message":"Schema being registered is incompatible with an earlier schema; field 2 changed type"}`)
		return true
	})
	_, err := client(t, fake.URL(), schemareg.Builtin()).Register(context.Background(), specs)
	var inc *schemareg.IncompatibleError
	if !errors.As(err, &inc) || inc.Subject != subject {
		t.Fatalf("err = %v, want an IncompatibleError for %s", err, subject)
	}
	if !strings.Contains(err.Error(), subject) || !strings.Contains(err.Error(), "field 2 changed type") {
		t.Fatalf("error must name the subject and pass the registry's message on: %v", err)
	}
}

// A writer's lookup of a schema nobody registered is NotRegistered, and
// registers nothing.
func TestLookupNotRegistered(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	_, err := client(t, fake.URL(), schemareg.Builtin()).Lookup(context.Background(), publicTopics(""))
	var nr *schemareg.NotRegisteredError
	if !errors.As(err, &nr) {
		t.Fatalf("err = %v, want NotRegisteredError", err)
	}
	if subs, _ := srClient(t, fake.URL()).Subjects(context.Background()); len(subs) != 0 {
		t.Fatalf("lookup registered %v", subs)
	}
}

func srClient(t *testing.T, url string) *sr.Client {
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// An unreachable registry is an error naming schema_registry.url, never
// its password.
func TestUnreachableNamesTheKey(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	pw := "s3cret-pw"
	pwFile := t.TempDir() + "/pw"
	os.WriteFile(pwFile, []byte(pw+"\n"), 0o600)
	cfg := config.Default()
	cfg.SchemaRegistry = config.SchemaRegistryConfig{URL: url, User: "u", PasswordFile: pwFile}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cl, err := schemareg.New(cfg.SchemaRegistry, schemareg.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Register(context.Background(), publicTopics(""))
	if err == nil || !strings.Contains(err.Error(), "schema_registry.url") || strings.Contains(err.Error(), pw) {
		t.Fatalf("err = %v, want one naming schema_registry.url without the password", err)
	}
}

// An imported file is registered first under its import path and
// referenced by name, subject and version; a well-known google/protobuf/
// import is the registry's own and neither.
func TestImportsAreReferences(t *testing.T) {
	dep := &descriptorpb.FileDescriptorProto{Name: proto.String("x/dep.proto"), Package: proto.String("x"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Dep")}}}
	top := &descriptorpb.FileDescriptorProto{Name: proto.String("x/top.proto"), Package: proto.String("x"), Syntax: proto.String("proto3"),
		Dependency: []string{"x/dep.proto", "google/protobuf/timestamp.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Top"), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String("d"), Number: proto.Int32(1), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(".x.Dep"), JsonName: proto.String("d")}}}}}
	ts := protodesc.ToFileDescriptorProto(timestamppb.File_google_protobuf_timestamp_proto)
	files, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{ts, dep, top}})
	if err != nil {
		t.Fatal(err)
	}
	src := fstest.MapFS{
		"x/dep.proto": {Data: []byte("syntax = \"proto3\";\npackage x;\nmessage Dep {}\n")},
		"x/top.proto": {Data: []byte("syntax = \"proto3\";\npackage x;\nimport \"x/dep.proto\";\nimport \"google/protobuf/timestamp.proto\";\nmessage Top { Dep d = 1; }\n")},
	}
	fake := srfake.New()
	defer fake.Close()
	regs, err := client(t, fake.URL(), schemareg.Files{Descriptors: files, Source: fs.FS(src)}).
		Register(context.Background(), []kafkax.TopicSpec{{Name: "t", Schema: "x/top.proto"}})
	if err != nil {
		t.Fatal(err)
	}
	ss, ok := fake.GetSchema("t-value", regs[0].Version)
	if !ok || len(ss.References) != 1 || ss.References[0] != (sr.SchemaReference{Name: "x/dep.proto", Subject: "x/dep.proto", Version: 1}) {
		t.Fatalf("t-value = %+v, want one reference to x/dep.proto version 1", ss)
	}
	if fake.SubjectExists("google/protobuf/timestamp.proto") {
		t.Fatal("a well-known import was registered")
	}
}

// Every message a public topic carries, framed under the registered ids,
// decodes with pkg/sr's serde and with readFraming; envelope.Payload
// finds the message by the header and, without one, by the leading 0.
func TestFramesDecode(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	specs := publicTopics("")
	ctx := context.Background()
	if _, err := client(t, fake.URL(), schemareg.Builtin()).Register(ctx, specs); err != nil {
		t.Fatal(err)
	}
	ids, err := client(t, fake.URL(), schemareg.Builtin()).Lookup(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	frames := schemareg.ConfluentFrames(ids)
	checked := 0
	for _, s := range specs {
		fd, _ := protoregistry.GlobalFiles.FindFileByPath(s.Schema)
		for i := range fd.Messages().Len() {
			md := fd.Messages().Get(i)
			checkFramed(t, frames, s.Name, ids[s.Name], md)
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d messages", checked)
	}
	if _, err := frames.For("not-a-public-topic", nil); err == nil {
		t.Fatal("a topic without an id must not fall back to plain")
	}
}

func checkFramed(t *testing.T, frames schemareg.Frames, topic string, id int, md protoreflect.MessageDescriptor) {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatal(err)
	}
	msg := sample(mt.New())
	plain, _ := proto.Marshal(msg.Interface())
	f, err := frames.For(topic, md)
	if err != nil {
		t.Fatal(err)
	}
	value := append(append([]byte(nil), f.Prefix...), plain...)
	out := mt.New().Interface()
	if body := srtest.Decode(t, value, id, out); string(body) != string(plain) || !proto.Equal(out, msg.Interface()) {
		t.Errorf("%s %s: decoded %v", topic, md.Name(), out)
	}
	for _, hdr := range [][]byte{f.Header(), nil} {
		rec := recordWith(value, hdr)
		got, err := envelope.Payload(rec)
		if err != nil || string(got) != string(plain) {
			t.Errorf("%s %s: Payload (content-type %q) = %v", topic, md.Name(), hdr, err)
		}
	}
}

// sample sets every scalar field of m to a value of its kind, so a
// decoded message that lost a byte differs.
func sample(m protoreflect.Message) protoreflect.Message {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.IsList() || f.IsMap() {
			continue
		}
		switch f.Kind() {
		case protoreflect.StringKind:
			m.Set(f, protoreflect.ValueOfString("v"+string(f.Name())))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind:
			m.Set(f, protoreflect.ValueOfInt64(int64(f.Number())*1000))
		case protoreflect.Int32Kind:
			m.Set(f, protoreflect.ValueOfInt32(int32(f.Number())))
		case protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		}
	}
	return m
}

func recordWith(value, contentType []byte) *kgo.Record {
	r := &kgo.Record{Value: value}
	if contentType != nil {
		r.Headers = []kgo.RecordHeader{{Key: envelope.HeaderContentType, Value: contentType}}
	}
	return r
}

// A password in schema_registry.url's user info stays out of the errors
// too (pkg/sr names the request URL it failed on in its own error text),
// and still logs in.
func TestUnreachableDropsURLUserInfo(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	pw := "url-s3cret-pw"
	cl, err := schemareg.New(config.SchemaRegistryConfig{URL: "http://u:" + pw + "@" + addr}, schemareg.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Register(context.Background(), publicTopics(""))
	if err == nil || !strings.Contains(err.Error(), "schema_registry.url") || strings.Contains(err.Error(), pw) {
		t.Fatalf("err = %v, want one naming schema_registry.url without the password", err)
	}
	// A writer's wait logs the error and serves it on /readyz.
	var logs bytes.Buffer
	var notReady []string
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	cl.WaitIDs(ctx, publicTopics(""), slog.New(slog.NewTextHandler(&logs, nil)), func(err error) { notReady = append(notReady, fmt.Sprint(err)) })
	if len(notReady) == 0 || strings.Contains(strings.Join(notReady, "\n")+logs.String(), pw) {
		t.Fatalf("readiness %q and log show the password or nothing:\n%s", notReady, logs.String())
	}

	fake := srfake.New()
	defer fake.Close()
	var logins []string
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		user, pass, _ := r.BasicAuth()
		logins = append(logins, user+":"+pass)
		return false
	})
	live := strings.Replace(fake.URL(), "://", "://u:"+pw+"@", 1)
	if _, err := client(t, live, schemareg.Builtin()).Register(context.Background(), publicTopics("")); err != nil {
		t.Fatal(err)
	}
	if len(logins) == 0 || logins[0] != "u:"+pw {
		t.Fatalf("basic auth %q, want the URL's user info", logins)
	}
}

// A server that answers 404 without a registry's error code (a wrong path
// in schema_registry.url, a proxy) is no missing schema: the error names
// schema_registry.url, never asks to run the register command again.
func TestNotARegistryNamesTheURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	cl := client(t, srv.URL+"/wrong", schemareg.Builtin())
	_, rerr := cl.Register(context.Background(), publicTopics(""))
	_, lerr := cl.Lookup(context.Background(), publicTopics(""))
	for _, err := range []error{rerr, lerr} {
		var nr *schemareg.NotRegisteredError
		if err == nil || errors.As(err, &nr) || !strings.Contains(err.Error(), "schema_registry.url "+srv.URL+"/wrong") {
			t.Errorf("err = %v, want one naming schema_registry.url", err)
		}
	}
}

// schema_registry.tls is honoured: the CA, the client certificate of a
// registry that requires one, and server_name (the certificate has no IP).
func TestTLS(t *testing.T) {
	pki := testenv.NewPKI(t, "registry.test", false)
	fake := srfake.New()
	defer fake.Close()
	target, _ := url.Parse(fake.URL())
	srv := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	srv.TLS = pki.ServerTLS(true)
	srv.StartTLS()
	defer srv.Close()
	full := config.ClientTLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey, ServerName: "registry.test"}
	register := func(tc config.ClientTLSConfig) error {
		cl, err := schemareg.New(config.SchemaRegistryConfig{URL: srv.URL, TLS: tc}, schemareg.Builtin())
		if err != nil {
			return err
		}
		_, err = cl.Register(context.Background(), publicTopics(""))
		return err
	}
	if err := register(full); err != nil {
		t.Fatalf("with the CA, the client certificate and server_name: %v", err)
	}
	noName, noCert := full, full
	noName.ServerName = ""
	noCert.CertFile, noCert.KeyFile = "", ""
	for name, tc := range map[string]config.ClientTLSConfig{"without server_name": noName, "without a client certificate": noCert} {
		if err := register(tc); err == nil || !strings.Contains(err.Error(), "schema_registry.url") {
			t.Errorf("%s: %v, want a failure naming schema_registry.url", name, err)
		}
	}
}
