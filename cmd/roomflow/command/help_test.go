package command

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every help/*.txt file is some command's long help: a renamed or removed
// command leaves no text behind.
func TestHelpTextsAreUsed(t *testing.T) {
	var longs []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		longs = append(longs, c.Long)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRoot())
	files, err := fs.Glob(helpTexts, "help/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("help texts: %v %v", files, err)
	}
	for _, f := range files {
		text := help(strings.TrimSuffix(strings.TrimPrefix(f, "help/"), ".txt"))
		used := false
		for _, l := range longs {
			used = used || strings.HasSuffix(l, text)
		}
		if !used {
			t.Errorf("%s is no command's help text", f)
		}
	}
}
