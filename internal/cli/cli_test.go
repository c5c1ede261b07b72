package cli_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/cli"
)

// tree is a root with a group (lucky: pools fund) and a leaf taking one
// argument.
func tree() *cobra.Command {
	root := &cobra.Command{Use: "roomflow", SilenceErrors: true, SilenceUsage: true}
	group := &cobra.Command{Use: "pools"}
	group.AddCommand(&cobra.Command{Use: "fund", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
	root.AddCommand(group, &cobra.Command{Use: "peek", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }})
	cli.UsageErrors(root)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	return root
}

// Flag, argument and unknown-command mistakes are usage errors, at every
// level; a group without an argument prints its help; a good command line
// runs.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool
		text  string
	}{
		{[]string{"peek"}, true, "accepts 1 arg"},
		{[]string{"peek", "t", "--nope"}, true, "unknown flag"},
		{[]string{"pools", "fnd"}, true, `unknown command "fnd" for "roomflow pools"`},
		{[]string{"pools", "fund", "x"}, true, "unknown command"},
		{[]string{"pools"}, false, ""},
		{[]string{"peek", "t"}, false, ""},
	} {
		root := tree()
		root.SetArgs(tc.args)
		err := root.Execute()
		if cfgerr.IsUsage(err) != tc.usage || (tc.usage && !strings.Contains(err.Error(), tc.text)) {
			t.Errorf("%v: %v, want usage=%v containing %q", tc.args, err, tc.usage, tc.text)
		}
	}
}

func TestExitCode(t *testing.T) {
	if got := cli.ExitCode(cfgerr.Usage(errors.New("bad flag"))); got != cli.ExitUsage {
		t.Errorf("usage error: exit %d", got)
	}
	if got := cli.ExitCode(errors.New("mysql down")); got != cli.ExitFailure {
		t.Errorf("failure: exit %d", got)
	}
}
