package queue

import (
	"encoding/json"
	"errors"
	"time"
)

// PolicyVersion is one version of the placement policy as an admin set it:
// the rules document in the policy file's shape, who set it and why.
type PolicyVersion struct {
	Version int64           `json:"version"`
	Rules   json.RawMessage `json:"rules"`
	// SetBy is the id of the API token that set it, or "cli".
	SetBy string `json:"set_by"`
	// SetByName is that token's name, when listed and the token is still
	// stored.
	SetByName string    `json:"set_by_name,omitempty"`
	SetAt     time.Time `json:"set_at"`
	Comment   string    `json:"comment,omitempty"`
}

// ErrPolicyChanged is returned when a policy is set on top of a version
// that is no longer the one in effect: another admin set one meanwhile.
var ErrPolicyChanged = errors.New("the policy in effect changed meanwhile")

// MaxPolicyComment bounds a policy version's comment, in bytes.
const MaxPolicyComment = 1000
