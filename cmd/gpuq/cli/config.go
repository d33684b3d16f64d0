package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
)

// loadConfig returns a viper instance for cmd that resolves each key in the
// order flags > GPUQ_* environment > config file > defaults. Flag names are the
// keys: --nats-url is read from GPUQ_NATS_URL or `nats-url:` in the file.
func loadConfig(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("GPUQ")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	var bindErr error
	bind := func(f *pflag.Flag) {
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	}
	cmd.Flags().VisitAll(bind)
	cmd.InheritedFlags().VisitAll(bind)
	if bindErr != nil {
		return nil, bindErr
	}
	if path := configFile(cmd, v); path != "" {
		if err := readConfigFile(v, path); err != nil {
			return nil, fmt.Errorf("reading config file %s: %w", path, err)
		}
	}
	return v, nil
}

// configFile is the config file cmd reads: --config, GPUQ_CONFIG, or the
// one gpuq dev left in the current directory or the nearest of its
// parents; "" when none.
func configFile(cmd *cobra.Command, v *viper.Viper) string {
	path := v.GetString("config")
	if path == "" {
		path = os.Getenv("GPUQ_CONFIG")
	}
	if path == "" && cmd.Name() != "dev" {
		// `gpuq dev` leaves its connection settings here, so client
		// commands run from the same directory, or from a project
		// directory below it, find it without flags (as the Python
		// client does). dev itself writes it anew: a stale one names the
		// servers of its previous run.
		path = findDevConfig()
	}
	return path
}

// findDevConfig is the devConfigFile of the current directory or of the
// nearest parent that has one, relative when it is the current
// directory's; "" when none has.
func findDevConfig() string {
	if _, err := os.Stat(devConfigFile); err == nil {
		return devConfigFile
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
		path := filepath.Join(dir, devConfigFile)
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
}

// maxConfigFileBytes bounds a config file.
const maxConfigFileBytes = 16 << 20

// readConfigFile reads the config file at path into v, bounded, with YAML
// and JSON refused when they use aliases (see queue.CheckYAML) before
// anything expands them.
func readConfigFile(v *viper.Viper, path string) error {
	ext := strings.TrimPrefix(filepath.Ext(path), ".")
	if !slices.Contains(viper.SupportedExts, ext) {
		// viper names the formats it reads.
		v.SetConfigFile(path)
		return v.ReadInConfig()
	}
	data, err := readLimited(path, maxConfigFileBytes+1)
	if err != nil {
		return err
	}
	if len(data) > maxConfigFileBytes {
		return fmt.Errorf("over the %d-byte limit", maxConfigFileBytes)
	}
	switch ext {
	case "yaml", "yml", "json":
		if err := queue.CheckYAML(data, ""); err != nil {
			return err
		}
	}
	v.SetConfigType(ext)
	return v.ReadConfig(bytes.NewReader(data))
}

// devConfigFile is written by `gpuq dev` and read by default.
const devConfigFile = ".gpuq/config.yaml"

// loadConfigFormat is loadConfig followed by outputFormat, the start of
// every command that prints results.
func loadConfigFormat(cmd *cobra.Command) (*viper.Viper, string, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, "", err
	}
	format, err := outputFormat(v)
	if err != nil {
		return nil, "", err
	}
	return v, format, nil
}

// outputFormat returns the validated -o value.
func outputFormat(v *viper.Viper) (string, error) {
	switch o := v.GetString("output"); o {
	case "table", "json":
		return o, nil
	default:
		return "", fmt.Errorf("--output: must be table or json, got %q", o)
	}
}
