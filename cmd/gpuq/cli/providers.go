package cli

import (
	"fmt"
	"os"

	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/aws"
	"github.com/gpuq/gpuq/adapters/hivenet"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/adapters/runpod"
	"github.com/gpuq/gpuq/adapters/sim"
	"github.com/gpuq/gpuq/adapters/verda"
)

// verdaSettings is the config key providers.verda. The client secret may
// sit in the config file (client_secret) or in VERDA_CLIENT_SECRET; no
// command-line flag takes a credential.
type verdaSettings struct {
	BaseURL      string   `mapstructure:"base_url"`
	ClientID     string   `mapstructure:"client_id"`
	ClientSecret string   `mapstructure:"client_secret"`
	Image        string   `mapstructure:"image"`
	SSHKeyIDs    []string `mapstructure:"ssh_key_ids"`
	Currency     string   `mapstructure:"currency"`
}

// hivenetSettings is the config key providers.hivenet; the API key may sit
// in the config file (api_key) or in HIVENET_API_KEY.
type hivenetSettings struct {
	BaseURL   string `mapstructure:"base_url"`
	APIKey    string `mapstructure:"api_key"`
	ImageType string `mapstructure:"image_type"`
	ImageID   string `mapstructure:"image_id"`
	Currency  string `mapstructure:"currency"`
	PageSize  int    `mapstructure:"page_size"`
}

// awsSettings is the config key providers.aws. The keys may sit in the
// config file or in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN.
type awsSettings struct {
	AccessKeyID     string           `mapstructure:"access_key_id"`
	SecretAccessKey string           `mapstructure:"secret_access_key"`
	SessionToken    string           `mapstructure:"session_token"`
	Endpoint        string           `mapstructure:"endpoint"`
	Pools           []aws.PoolConfig `mapstructure:"pools"`
}

// runpodSettings is the config key providers.runpod; the API key may sit
// in the config file (api_key) or in RUNPOD_API_KEY.
type runpodSettings struct {
	APIKey   string              `mapstructure:"api_key"`
	Endpoint string              `mapstructure:"endpoint"`
	Pools    []runpod.PoolConfig `mapstructure:"pools"`
}

// configuredSources returns the offer sources the config names: the local
// pools (or the default ones), then each real provider whose section or
// credential is present. The scheduler and `gpuq offers` use the same set.
func configuredSources(v *viper.Viper) ([]adapters.OfferSource, error) {
	pools, err := poolsOrDefault(v)
	if err != nil {
		return nil, err
	}
	lp, err := local.New(pools)
	if err != nil {
		return nil, err
	}
	sources := []adapters.OfferSource{lp}
	if v.IsSet("providers.verda") || os.Getenv("VERDA_CLIENT_SECRET") != "" {
		var s verdaSettings
		if err := v.UnmarshalKey("providers.verda", &s, configDecodeHook()); err != nil {
			return nil, fmt.Errorf("config key providers.verda: %w", err)
		}
		if id := os.Getenv("VERDA_CLIENT_ID"); id != "" && s.ClientID == "" {
			s.ClientID = id
		}
		if secret := os.Getenv("VERDA_CLIENT_SECRET"); secret != "" {
			s.ClientSecret = secret
		}
		p, err := verda.New(verda.Config{BaseURL: s.BaseURL, ClientID: s.ClientID, ClientSecret: adapters.NewSecret(s.ClientSecret),
			Image: s.Image, SSHKeyIDs: s.SSHKeyIDs, Currency: s.Currency})
		if err != nil {
			return nil, fmt.Errorf("providers.%w", err)
		}
		sources = append(sources, p)
	}
	if v.IsSet("providers.hivenet") || os.Getenv("HIVENET_API_KEY") != "" {
		var s hivenetSettings
		if err := v.UnmarshalKey("providers.hivenet", &s, configDecodeHook()); err != nil {
			return nil, fmt.Errorf("config key providers.hivenet: %w", err)
		}
		if key := os.Getenv("HIVENET_API_KEY"); key != "" {
			s.APIKey = key
		}
		p, err := hivenet.New(hivenet.Config{BaseURL: s.BaseURL, APIKey: adapters.NewSecret(s.APIKey), ImageType: s.ImageType,
			ImageID: s.ImageID, Currency: s.Currency, PageSize: s.PageSize})
		if err != nil {
			return nil, fmt.Errorf("providers.%w", err)
		}
		sources = append(sources, p)
	}
	if v.IsSet("providers.aws") {
		var s awsSettings
		if err := v.UnmarshalKey("providers.aws", &s, configDecodeHook()); err != nil {
			return nil, fmt.Errorf("config key providers.aws: %w", err)
		}
		p, err := aws.New(aws.Config{AccessKeyID: s.AccessKeyID, SecretAccessKey: adapters.NewSecret(s.SecretAccessKey),
			SessionToken: adapters.NewSecret(s.SessionToken), Endpoint: s.Endpoint, Pools: s.Pools})
		if err != nil {
			return nil, fmt.Errorf("providers.%w", err)
		}
		sources = append(sources, p)
	}
	if v.IsSet("providers.runpod") {
		var s runpodSettings
		if err := v.UnmarshalKey("providers.runpod", &s, configDecodeHook()); err != nil {
			return nil, fmt.Errorf("config key providers.runpod: %w", err)
		}
		p, err := runpod.New(runpod.Config{APIKey: adapters.NewSecret(s.APIKey), Endpoint: s.Endpoint, Pools: s.Pools})
		if err != nil {
			return nil, fmt.Errorf("providers.%w", err)
		}
		sources = append(sources, p)
	}
	if v.IsSet("providers.sim") {
		// A simulated cloud served by `gpuq sim-cloud`.
		var s struct {
			URL string `mapstructure:"url"`
		}
		if err := v.UnmarshalKey("providers.sim", &s, configDecodeHook()); err != nil {
			return nil, fmt.Errorf("config key providers.sim: %w", err)
		}
		p, err := sim.Dial(s.URL, adapters.RetryConfig{})
		if err != nil {
			return nil, fmt.Errorf("providers.%w", err)
		}
		sources = append(sources, p)
	}
	return sources, nil
}
