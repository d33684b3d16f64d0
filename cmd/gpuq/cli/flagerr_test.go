package cli

import (
	"strings"
	"testing"
)

// An unknown flag's error names the flags it most likely meant, whatever
// the command; one with nothing like it is named alone. A duration without
// its unit is shown what one looks like.
func TestAnUnknownFlagNamesTheFlagsItWasLikelyMeantToBe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--gpus", "1", "--", "true"}, "unknown flag: --gpus (did you mean --gpu-count?); to give the job's command flags of its own, put the command after --"},
		{[]string{"submit", "--gpu", "1", "--", "true"}, "unknown flag: --gpu (did you mean --gpu-count or --cpu?)"},
		{[]string{"submit", "--mem", "3", "--", "true"}, "unknown flag: --mem (did you mean --memory-gb?)"},
		{[]string{"submit", "--cpus", "2", "--", "true"}, "unknown flag: --cpus (did you mean --cpu?)"},
		{[]string{"submit", "--max-retries", "2", "--", "true"}, "unknown flag: --max-retries (did you mean --max-errors or --max-price?)"},
		{[]string{"submit", "--lable", "a=b", "--", "true"}, "unknown flag: --lable (did you mean --label?)"},
		{[]string{"submit", "python", "train.py", "--epochs", "3"}, "unknown flag: --epochs; to give the job's command flags of its own"},
		{[]string{"ls", "--labels", "a=b"}, "unknown flag: --labels (did you mean --label?)"},
		{[]string{"ls", "--stat", "running"}, "unknown flag: --stat (did you mean --state?)"},
		{[]string{"logs", "--folow", "x"}, "unknown flag: --folow (did you mean --follow?)"},
		{[]string{"wait", "--timout", "3s", "x"}, "unknown flag: --timout (did you mean --timeout?)"},
		{[]string{"status", "--ouput", "json", "x"}, "unknown flag: --ouput (did you mean --output?)"},
		{[]string{"ls", "--zzz"}, "unknown flag: --zzz"},
		{[]string{"submit", "--timeout", "5", "--", "true"}, `invalid argument "5" for "--timeout" flag: time: missing unit in duration "5" (a duration has a unit: 90s, 30m, 2h45m)`},
		{[]string{"wait", "--timeout", "1h30", "x"}, `invalid argument "1h30" for "--timeout" flag: time: missing unit in duration "1h30" (a duration has a unit: 90s, 30m, 2h45m)`},
	} {
		_, _, err := runCLI(t, c.args...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.HasSuffix(c.want, "--zzz") && err.Error() != c.want {
			t.Errorf("gpuq %s: got %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
