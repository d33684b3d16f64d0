package aws

import (
	"context"
	"errors"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/gpuq/gpuq/adapters"
)

// errorKinds maps EC2's documented error codes (the API reference's "Error
// codes" page) onto the contract's kinds. A code not listed is judged by
// its HTTP status: 5xx is the provider failing, anything else an invalid
// request.
var errorKinds = map[string]error{
	// Capacity: EC2 has none of the type now (a server error, HTTP 500),
	// or no more spot instances or spot capacity at the asked price.
	"InsufficientInstanceCapacity":         adapters.ErrCapacityUnavailable,
	"InsufficientCapacity":                 adapters.ErrCapacityUnavailable,
	"InsufficientHostCapacity":             adapters.ErrCapacityUnavailable,
	"InsufficientReservedInstanceCapacity": adapters.ErrCapacityUnavailable,
	"UnfulfillableCapacity":                adapters.ErrCapacityUnavailable,
	"MaxSpotInstanceCountExceeded":         adapters.ErrCapacityUnavailable,
	"SpotMaxPriceTooLow":                   adapters.ErrCapacityUnavailable,
	// Quota: the account's instance or vCPU limit.
	"InstanceLimitExceeded": adapters.ErrQuotaExceeded,
	"VcpuLimitExceeded":     adapters.ErrQuotaExceeded,
	// Credentials and permissions.
	"AuthFailure":                adapters.ErrAuth,
	"UnauthorizedOperation":      adapters.ErrAuth,
	"Blocked":                    adapters.ErrAuth,
	"OptInRequired":              adapters.ErrAuth,
	"PendingVerification":        adapters.ErrAuth,
	"SignatureDoesNotMatch":      adapters.ErrAuth,
	"IncompleteSignature":        adapters.ErrAuth,
	"InvalidClientTokenId":       adapters.ErrAuth,
	"MissingAuthenticationToken": adapters.ErrAuth,
	"RequestExpired":             adapters.ErrAuth,
	// Requests EC2 refused as malformed.
	"InvalidParameterValue":       adapters.ErrInvalidRequest,
	"InvalidParameterCombination": adapters.ErrInvalidRequest,
	"InvalidParameter":            adapters.ErrInvalidRequest,
	"MissingParameter":            adapters.ErrInvalidRequest,
	"UnknownParameter":            adapters.ErrInvalidRequest,
	"InvalidAMIID.NotFound":       adapters.ErrInvalidRequest,
	"InvalidAMIID.Malformed":      adapters.ErrInvalidRequest,
	"InvalidAMIID.Unavailable":    adapters.ErrInvalidRequest,
	"InvalidSubnetID.NotFound":    adapters.ErrInvalidRequest,
	"InvalidGroup.NotFound":       adapters.ErrInvalidRequest,
	"IdempotentParameterMismatch": adapters.ErrInvalidRequest,
	"Unsupported":                 adapters.ErrInvalidRequest,
	"UnsupportedOperation":        adapters.ErrInvalidRequest,
	// The instance does not exist (or its id cannot be one).
	"InvalidInstanceID.NotFound":  adapters.ErrNotFound,
	"InvalidInstanceID.Malformed": adapters.ErrNotFound,
	// Throttling: EC2 sends no Retry-After; the caller's backoff applies.
	"RequestLimitExceeded": adapters.ErrRateLimited,
	"Throttling":           adapters.ErrRateLimited,
	// EC2 itself failing.
	"InternalError":      adapters.ErrProviderDown,
	"InternalFailure":    adapters.ErrProviderDown,
	"ServiceUnavailable": adapters.ErrProviderDown,
	"Unavailable":        adapters.ErrProviderDown,
}

// kindOf classifies an SDK error.
func kindOf(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		if k, ok := errorKinds[api.ErrorCode()]; ok {
			return k
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch s := re.HTTPStatusCode(); {
		case s == 429:
			return adapters.ErrRateLimited
		case s == 401 || s == 403:
			return adapters.ErrAuth
		case s >= 500:
			return adapters.ErrProviderDown
		default:
			return adapters.ErrInvalidRequest
		}
	}
	// No answer at all: a timeout, a refused or dropped connection. For a
	// launch the outcome is unknown.
	if errors.Is(err, context.Canceled) {
		return adapters.ErrTransient
	}
	return adapters.ErrProviderDown
}

// fail wraps an SDK error as the contract's ProviderError.
func fail(op, pool string, err error) error {
	if err == nil {
		return nil
	}
	var pe *adapters.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	return &adapters.ProviderError{Provider: ProviderName, Op: op, Pool: pool, Kind: kindOf(err), Err: err}
}
