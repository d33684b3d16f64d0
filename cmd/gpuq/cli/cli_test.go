package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runCLI runs gpuq in-process and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := New()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// TestEveryFlagsHelpNamesItsValueAndDefaultAsTyped walks every command: the
// word after a flag in --help is a value's name (pflag takes a back-quoted word
// of the usage for it, so a quoted config key would show up there), and a
// default is shown as it would be typed.
func TestEveryFlagsHelpNamesItsValueAndDefaultAsTyped(t *testing.T) {
	valueName := regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	padded := regexp.MustCompile(`\.[0-9]*0{4}`)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if name != "" && !valueName.MatchString(name) {
				t.Errorf("%s --%s: help shows its value as %q", c.CommandPath(), f.Name, name)
			}
			if padded.MatchString(f.DefValue) {
				t.Errorf("%s --%s: help shows its default as %q", c.CommandPath(), f.Name, f.DefValue)
			}
		}
		c.LocalFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(New())
}

// A command given the wrong number of arguments says how to call it, and a
// client command that cannot reach its API says where it looked.
func TestArgumentAndConnectionErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	config := writeFile(t, "gpuq.yaml", "url: http://127.0.0.1:1\ntoken: gq_unused\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs"}, "logs takes job ids or --label KEY=VALUE (usage: gpuq logs JOB_ID… | --label KEY=VALUE [flags])"},
		{[]string{"status", "a", "b"}, "status takes 1 argument, got 2 (usage: gpuq status JOB_ID [flags])"},
		{[]string{"token", "revoke"}, "token revoke takes 1 argument, got 0 (usage: gpuq token revoke TOKEN_ID [flags])"},
		{[]string{"ls", "--config", config}, "GET /v1/jobs: cannot reach the gpuq HTTP API at http://127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused (is gpuq dev or gpuq server running there?)"},
	} {
		_, _, err := runCLI(t, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("gpuq %s: want %q, got %v", strings.Join(tc.args, " "), tc.want, err)
		}
	}
}
