package command

import (
	"embed"
	"strings"
)

// helpTexts are the commands' long help texts, one file per command
// (help/<command>.txt, a subcommand as <parent>-<command>.txt): prose an
// operator reads is edited as text, not as Go string literals.
//
//go:embed help/*.txt
var helpTexts embed.FS

// help is the long help text of the command named name: its file without
// the final newline. A missing file panics: every test that builds the
// command tree finds it.
func help(name string) string {
	b, err := helpTexts.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic("command: no help text: " + err.Error())
	}
	return strings.TrimSuffix(string(b), "\n")
}
