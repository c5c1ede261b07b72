package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// checkKeys walks the parsed YAML document n against the Go type t it
// decodes into and reports, as *cfgerr.FieldError keyed by the dotted key
// ("relay.batch_sise", "relay.routes.RoomGiftSent", "kafka.brokers[1]"),
// every key t has no field for and every value that does not decode into
// its field's type (a wrong type, a bad duration, an int out of range). The
// YAML decoder's own errors name only a line and a Go type
// ("field batch_sise not found in type config.RelayConfig").
//
// It only reads: each value is decoded into a scratch value of its field's
// type with yaml's own rules (custom UnmarshalYAML included), so what it
// accepts is what the strict decode that follows accepts. Anchors, aliases
// and merge keys ("<<") are followed.
func checkKeys(n *yaml.Node, t reflect.Type) error {
	var errs []error
	walk(n, t, "", &errs, 0)
	return errors.Join(errs...)
}

// maxDepth bounds the walk (an alias cycle is refused by the parser, but a
// bound costs nothing).
const maxDepth = 64

func walk(n *yaml.Node, t reflect.Type, path string, errs *[]error, depth int) {
	if n == nil || depth > maxDepth {
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) > 0 {
			walk(n.Content[0], t, path, errs, depth+1)
		}
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // the field keeps its value, as the decoder does
	}
	if unmarshaler(t) {
		leaf(n, t, path, errs)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		walk(n, t.Elem(), path, errs, depth+1)
	case reflect.Struct, reflect.Map:
		if n.Kind != yaml.MappingNode {
			leaf(n, t, path, errs)
			return
		}
		var fields map[string]reflect.Type
		if t.Kind() == reflect.Struct {
			fields = yamlFields(t)
		}
		eachPair(n, func(k, v *yaml.Node) {
			if k.Value == "<<" && k.ShortTag() == "!!merge" {
				for _, m := range mergeSources(v) {
					walk(m, t, path, errs, depth+1)
				}
				return
			}
			key := join(path, k.Value)
			if fields == nil { // a map: its keys and values have one type each
				leaf(k, t.Key(), key, errs)
				walk(v, t.Elem(), key, errs, depth+1)
				return
			}
			ft, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, &cfgerr.FieldError{Key: key, Msg: fmt.Sprintf("unknown key (line %d)", k.Line)})
				return
			}
			walk(v, ft, key, errs, depth+1)
		})
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			leaf(n, t, path, errs)
			return
		}
		for i, e := range n.Content {
			walk(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", errs, depth+1)
		}
	default:
		leaf(n, t, path, errs)
	}
}

// leaf decodes n into a scratch value of type t and records a failure
// under path.
func leaf(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		key := path
		if key == "" {
			key = "(document)"
		}
		*errs = append(*errs, &cfgerr.FieldError{Key: key, Msg: yamlMessage(err)})
	}
}

// yamlMessage is err without yaml's "yaml: unmarshal errors:" preamble
// and without the value yaml quotes ("line 3: cannot unmarshal !!str into
// int"): a secret in a misshapen section (mysql: "user:pw@...") would be.
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = quotedValue.ReplaceAllString(m, "$1")
		}
		return strings.Join(msgs, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// quotedValue is the value in a yaml type error: " `app:hun...`" before
// " into".
var quotedValue = regexp.MustCompile(" `.*`( into )")

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// unmarshaler reports whether t (or *t) decodes itself.
func unmarshaler(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

// yamlFields maps the YAML key of every field of struct t (the yaml tag's
// name, or the lowercased field name as yaml v3 does; ",inline" structs
// contribute their own fields) to its type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func eachPair(n *yaml.Node, f func(k, v *yaml.Node)) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		f(n.Content[i], n.Content[i+1])
	}
}

// mergeSources are the mappings a merge key's value names: one mapping
// (or an alias of one) or a sequence of them.
func mergeSources(v *yaml.Node) []*yaml.Node {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		return v.Content
	}
	return []*yaml.Node{v}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
