package aws

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/gpuq/gpuq/adapters"
)

func TestDocumentedErrorCodesMapOntoTheContractsKinds(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]error{
		"InsufficientInstanceCapacity": adapters.ErrCapacityUnavailable,
		"MaxSpotInstanceCountExceeded": adapters.ErrCapacityUnavailable,
		"SpotMaxPriceTooLow":           adapters.ErrCapacityUnavailable,
		"VcpuLimitExceeded":            adapters.ErrQuotaExceeded,
		"InstanceLimitExceeded":        adapters.ErrQuotaExceeded,
		"UnauthorizedOperation":        adapters.ErrAuth,
		"IdempotentParameterMismatch":  adapters.ErrInvalidRequest,
		"InvalidInstanceID.Malformed":  adapters.ErrNotFound,
		"RequestLimitExceeded":         adapters.ErrRateLimited,
		"Unavailable":                  adapters.ErrProviderDown,
	} {
		err := fail("launch", "p", fmt.Errorf("operation error: %w", &smithy.GenericAPIError{Code: code}))
		if !errors.Is(err, want) {
			t.Errorf("%s: want %v, got %v", code, want, err)
		}
	}
	// An undocumented code is judged by its HTTP status.
	resp := func(status int) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err:      &smithy.GenericAPIError{Code: "SomethingNew"}}}
	}
	if err := fail("list", "", resp(502)); !errors.Is(err, adapters.ErrProviderDown) {
		t.Errorf("an unknown code with 502 must be the provider failing, got %v", err)
	}
	if err := fail("list", "", resp(400)); !errors.Is(err, adapters.ErrInvalidRequest) {
		t.Errorf("an unknown code with 400 must be an invalid request, got %v", err)
	}
	if err := fail("list", "", errors.New("dial tcp: connection refused")); !errors.Is(err, adapters.ErrProviderDown) {
		t.Errorf("no answer at all must be the provider failing, got %v", err)
	}
}
