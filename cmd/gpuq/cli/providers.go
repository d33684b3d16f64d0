package cli

import (
	"fmt"
	"os"

	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/hivenet"
	"github.com/gpuq/gpuq/adapters/local"
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
	return sources, nil
}
