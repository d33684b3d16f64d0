package hivenet

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// ProviderName is the provider name of every Hivenet offer.
const ProviderName = "hivenet"

// DefaultBaseURL is the production API the Compute guides use; the API
// reference names https://api.hivenet.com/v1, so the base is configurable.
const DefaultBaseURL = "https://api.hivecompute.ai/v1"

// Config is the Hivenet adapter's configuration, under the config key
// `providers.hivenet`; the API key comes from the environment
// (HIVENET_API_KEY) or the config file, never from a flag.
type Config struct {
	// BaseURL is the API's base; default DefaultBaseURL.
	BaseURL string `json:"base_url" yaml:"base_url" mapstructure:"base_url"`
	// APIKey is the account's API key.
	APIKey adapters.Secret `json:"-" yaml:"-" mapstructure:"-"`
	// ImageType and ImageID name the image instances boot, as GET /images
	// lists them; it must carry gpuq and its systemd unit (see deploy/).
	ImageType string `json:"image_type" yaml:"image_type" mapstructure:"image_type"`
	ImageID   string `json:"image_id" yaml:"image_id" mapstructure:"image_id"`
	// Currency is the currency of Hivenet's credits; default EUR.
	Currency string `json:"currency" yaml:"currency" mapstructure:"currency"`
	// PageSize is the page size asked of listings, 1–200; default 50.
	PageSize int `json:"page_size" yaml:"page_size" mapstructure:"page_size"`
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
	if c.ImageType == "" {
		c.ImageType = "vm"
	}
	if c.Currency == "" {
		c.Currency = "EUR"
	}
	if c.PageSize == 0 {
		c.PageSize = 50
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
		return fmt.Errorf("hivenet.base_url: want an http(s) URL, got %q", c.BaseURL)
	case u.User != nil:
		return fmt.Errorf("hivenet.base_url: must not carry credentials")
	case c.APIKey.IsZero():
		return fmt.Errorf("hivenet.api_key: must be set, through HIVENET_API_KEY or the config file")
	case c.ImageID == "":
		return fmt.Errorf("hivenet.image_id: must be set (an image from GET /images that carries gpuq)")
	case len(c.Currency) != 3 || strings.ToUpper(c.Currency) != c.Currency:
		return fmt.Errorf("hivenet.currency: want an ISO 4217 code such as EUR, got %q", c.Currency)
	case c.PageSize < 1 || c.PageSize > 200:
		return fmt.Errorf("hivenet.page_size: must be 1–200, got %d", c.PageSize)
	}
	return c.Retry.Validate()
}
