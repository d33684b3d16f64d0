package verda

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// ProviderName is the provider name of every Verda offer.
const ProviderName = "verda"

// DefaultBaseURL is Verda's public API.
const DefaultBaseURL = "https://api.verda.com/v1"

// Config is the Verda adapter's configuration, under the config key
// `providers.verda`; the client secret comes from the environment
// (VERDA_CLIENT_SECRET) or the config file, never from a flag.
type Config struct {
	// BaseURL is the API's base; default DefaultBaseURL.
	BaseURL string `json:"base_url" yaml:"base_url" mapstructure:"base_url"`
	// ClientID and ClientSecret are the project's Cloud API credentials.
	ClientID     string          `json:"client_id" yaml:"client_id" mapstructure:"client_id"`
	ClientSecret adapters.Secret `json:"-" yaml:"-" mapstructure:"-"`
	// Image is the OS image instances boot; it must carry gpuq and its
	// systemd unit (see deploy/). Default ubuntu-24.04-cuda-12.8-open-docker.
	Image string `json:"image" yaml:"image" mapstructure:"image"`
	// SSHKeyIDs are the project's SSH keys put on every instance.
	SSHKeyIDs []string `json:"ssh_key_ids" yaml:"ssh_key_ids" mapstructure:"ssh_key_ids"`
	// Currency asks for prices in this ISO 4217 code; empty: the
	// account's currency.
	Currency string `json:"currency" yaml:"currency" mapstructure:"currency"`
	// Retry bounds retries of every call.
	Retry adapters.RetryConfig `json:"-" yaml:"-" mapstructure:"-"`
	// HTTPClient is used for every call; default one with a 30s timeout.
	HTTPClient *http.Client `json:"-" yaml:"-" mapstructure:"-"`
}

// WithDefaults fills the zero fields with their defaults.
func (c Config) WithDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Image == "" {
		c.Image = "ubuntu-24.04-cuda-12.8-open-docker"
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	c.Retry = c.Retry.WithDefaults()
	return c
}

func (c Config) validate() error {
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Errorf("verda.base_url: want an http(s) URL, got %q", c.BaseURL)
	case u.User != nil:
		return fmt.Errorf("verda.base_url: must not carry credentials")
	case c.ClientID == "":
		return fmt.Errorf("verda.client_id: must be set (the project's Cloud API credentials)")
	case c.ClientSecret.IsZero():
		return fmt.Errorf("verda.client_secret: must be set, through VERDA_CLIENT_SECRET or the config file")
	case c.Currency != "" && (len(c.Currency) != 3 || strings.ToUpper(c.Currency) != c.Currency):
		return fmt.Errorf("verda.currency: want an ISO 4217 code such as EUR, got %q", c.Currency)
	}
	return c.Retry.Validate()
}
