package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/testenv"
)

// repoRoot is the checkout this test runs in (benchmarks/compare/..).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// script runs benchmarks/compare.sh with env on top of the test's
// environment and a TMPDIR of its own, and returns its output and exit
// status after checking it left nothing behind.
func script(t *testing.T, env ...string) (string, int) {
	t.Helper()
	root := repoRoot(t)
	tmp := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "benchmarks/compare.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), append([]string{"TMPDIR=" + tmp, "BASE=", "BENCH=", "ROUNDS=", "ARGS=", "A_ARGS=", "B_ARGS=", "OUT=" + filepath.Join(t.TempDir(), "out")}, env...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in TMPDIR: %v", left)
	}
	// The script makes its BASE worktree under TMPDIR; other worktrees of
	// the checkout (other people's) may come and go meanwhile.
	for _, w := range worktreePaths(t, root) {
		if strings.HasPrefix(w, tmp) {
			t.Errorf("worktree %s left behind", w)
		}
	}
	return string(out), code
}

// worktreePaths lists the checkout's worktrees by path.
func worktreePaths(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	for _, l := range strings.Split(gitOut(t, dir, "worktree", "list", "--porcelain"), "\n") {
		if p, ok := strings.CutPrefix(l, "worktree "); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// A side slowed at least twofold is flagged, in the right direction, at
// two rounds; the raw figures read back into the same table.
func TestScriptFlagsASlowedStage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a benchmark: not in -short")
	}
	outDir := filepath.Join(t.TempDir(), "report")
	out, code := script(t, "BENCH=processors", "ROUNDS=2", "ARGS=-events=40000", "B_ARGS=-test-slow-per-event=50us", "OUT="+outDir)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	row := regexp.MustCompile(`(?m)^\| processors \| room proc\. \| throughput, events/s \(higher is better\) \| [^|]+ \| [^|]+ \| ([\d.]+) \| \*\*B worse\*\* \|$`).FindStringSubmatch(out)
	if row == nil {
		t.Fatalf("the slowed room processor is not flagged B worse:\n%s", out)
	}
	if ratio, _ := strconv.ParseFloat(row[1], 64); ratio > 0.5 {
		t.Errorf("B/A %v, want at most 0.5 for a side slowed twofold or more", ratio)
	}
	for _, want := range []string{"with uncommitted changes", "with B_ARGS '-test-slow-per-event=50us'", "2 rounds, A B A B", "elapsed: "} {
		if !strings.Contains(out, want) && !strings.Contains(out, strings.Replace(want, "with uncommitted changes", "no uncommitted changes", 1)) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	md, err := os.ReadFile(filepath.Join(outDir, "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readRaw(filepath.Join(outDir, "raw.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	writeTable(&table, rows)
	if !strings.Contains(string(md), table.String()) {
		t.Errorf("raw.tsv gives another table than compare.md:\n%s\nvs\n%s", table.String(), md)
	}
	for _, r := range rows {
		if len(r.a) != 2 || len(r.b) != 2 {
			t.Errorf("%s %s: %d A and %d B rounds, want 2 each", r.m.Stage, r.m.Name, len(r.a), len(r.b))
		}
	}
	for _, side := range []string{"A-1", "B-1", "A-2", "B-2"} {
		if _, err := os.Stat(filepath.Join(outDir, "processors-"+side+".txt")); err != nil {
			t.Errorf("no output of run %s: %v", side, err)
		}
	}
}

// Bad input is refused before anything runs, with exit 2 and a line
// naming it; a BASE that does not build is exit 1; neither leaves a
// worktree or a temporary directory.
func TestScriptRefusesBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the comparison tool: not in -short")
	}
	root := repoRoot(t)
	for _, tc := range []struct {
		name string
		env  []string
		code int
		want string
	}{
		{"not a ref", []string{"BASE=no-such-ref-of-roomflow"}, 2, "BASE=no-such-ref-of-roomflow is not a git ref"},
		{"unknown benchmark", []string{"BASE=HEAD", "BENCH=relay,nope"}, 2, `BENCH: "nope": not a benchmark`},
		{"e2e needs make bench", []string{"BASE=HEAD", "BENCH=e2e"}, 2, `BENCH: "e2e": needs a roomflow binary per side`},
		{"rounds not a number", []string{"BASE=HEAD", "ROUNDS=three"}, 2, `ROUNDS="three": a number of at least 2`},
		{"one round", []string{"BASE=HEAD", "ROUNDS=1"}, 2, `ROUNDS="1": a number of at least 2`},
		{"MariaDB down", []string{"BASE=HEAD", "ROOMFLOW_TEST_MYSQL_DSN=root@tcp(" + testenv.ClosedAddr(t) + ")/"}, 2, "MariaDB not reachable"},
		{"same sides", []string{"A_ARGS=-rounds=1", "B_ARGS=-rounds=1"}, 2, "without BASE, A_ARGS and B_ARGS must differ"},
		{"a flag no benchmark takes", []string{"BENCH=processors", "ROUNDS=2", "B_ARGS=-no-such-flag=1"}, 2, "B_ARGS: -no-such-flag is a flag of none of the selected benchmarks"},
		{"base does not build", []string{"BASE=" + brokenCommit(t, root), "BENCH=processors", "ROUNDS=2"}, 1, "does not build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := script(t, tc.env...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
}

// brokenCommit is a commit on top of HEAD whose processors benchmark does
// not compile, made without touching a branch, the index or the working
// tree (a temporary index, commit-tree): no ref names it.
func brokenCommit(t *testing.T, root string) string {
	t.Helper()
	index := filepath.Join(t.TempDir(), "index")
	git := func(stdin string, args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("", "read-tree", "HEAD")
	blob := git("package main\n\nfunc broken( {\n", "hash-object", "-w", "--stdin")
	git("", "update-index", "--add", "--cacheinfo", "100644,"+blob+",benchmarks/processors/broken.go")
	return git("a processors benchmark that does not compile\n", "commit-tree", git("", "write-tree"), "-p", "HEAD")
}
