package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const configurationDoc = "../../docs/configuration.md"

// TestConfigurationDocMatchesDefaults holds docs/configuration.md to what
// `roomflow config` knows: every key it prints for an empty file is a row of
// the document, every row names such a key, and the row's default is the
// value printed (durations compared as durations, so the document may write
// 168h for 168h0m0s). A new key fails here until it is documented.
func TestConfigurationDocMatchesDefaults(t *testing.T) {
	raw, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedDefaults(t, string(raw))
	known := printedDefaults(t)
	for key, value := range known {
		cell, ok := documented[key]
		if !ok {
			t.Errorf("%s: missing from docs/configuration.md (default %s)", key, yamlText(t, value))
			continue
		}
		if !sameDefault(t, cell, value) {
			t.Errorf("%s: docs/configuration.md says the default is `%s`, roomflow config prints %s", key, cell, yamlText(t, value))
		}
	}
	for key := range documented {
		if _, ok := known[key]; !ok {
			t.Errorf("%s: documented in docs/configuration.md but not a key roomflow config knows", key)
		}
	}
}

// keyRow is a row of the document's key table: | `dotted.key` | `default` | meaning |.
var keyRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)` \\| `([^`]*)` \\|")

// documentedDefaults maps each documented key to its default cell; a key
// documented twice is an error.
func documentedDefaults(t *testing.T, doc string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	for _, m := range keyRow.FindAllStringSubmatch(doc, -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("%s: documented twice in docs/configuration.md", m[1])
		}
		rows[m[1]] = m[2]
	}
	if len(rows) == 0 {
		t.Fatal("docs/configuration.md: no key table found")
	}
	return rows
}

// printedDefaults flattens what `roomflow config` prints for an empty file
// (Default().YAML()) into dotted keys; a list or an empty map is one value.
func printedDefaults(t *testing.T) map[string]*yaml.Node {
	t.Helper()
	out, err := Default().YAML()
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[string]*yaml.Node{}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := join(prefix, n.Content[i].Value), n.Content[i+1]
			if value.Kind == yaml.MappingNode && len(value.Content) > 0 {
				walk(key, value)
				continue
			}
			keys[key] = value
		}
	}
	walk("", doc.Content[0])
	return keys
}

// sameDefault compares a documented default with a printed one as YAML
// values, durations by their length.
func sameDefault(t *testing.T, cell string, printed *yaml.Node) bool {
	t.Helper()
	var want, got any
	if err := yaml.Unmarshal([]byte(cell), &want); err != nil {
		t.Errorf("default `%s` is not a YAML value: %v", cell, err)
		return false
	}
	if err := printed.Decode(&got); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(asDuration(want), asDuration(got))
}

// asDuration turns a string that is a Go duration into a time.Duration.
func asDuration(v any) any {
	if s, ok := v.(string); ok {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return v
}

// yamlText renders a printed value on one line for an error message.
func yamlText(t *testing.T, n *yaml.Node) string {
	t.Helper()
	out, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return "`" + strings.TrimSpace(regexp.MustCompile(`\s*\n\s*`).ReplaceAllString(string(out), " ")) + "`"
}

// catalogueRow is a row of a table whose first cell is a topic name.
var catalogueRow = regexp.MustCompile("^\\| `([a-z0-9-]+\\.[a-z0-9.-]+)` \\|")

// TestDataTeamCatalogueListsThePublicTopics holds docs/data-team.md's
// catalogue to Topics.Public: every public topic is a row naming its
// subject, and the catalogue lists no other topic.
func TestDataTeamCatalogueListsThePublicTopics(t *testing.T) {
	raw, err := os.ReadFile("../../docs/data-team.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // topic -> its catalogue row
	for _, line := range strings.Split(string(raw), "\n") {
		if m := catalogueRow.FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	public := map[string]bool{}
	for _, s := range Default().Kafka.Topics.Public() {
		public[s.Name] = true
		if row, ok := rows[s.Name]; !ok || !strings.Contains(row, "`"+s.Name+"-value`") {
			t.Errorf("%s: no catalogue row naming its subject in docs/data-team.md", s.Name)
		}
	}
	for topic := range rows {
		if !public[topic] {
			t.Errorf("%s: in docs/data-team.md's catalogue but not a public topic", topic)
		}
	}
}
