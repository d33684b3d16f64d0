package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Role is what a token may do within its projects; it mirrors the
// token_role enum.
type Role string

const (
	// RoleRead sees jobs, logs, results, placements and spend.
	RoleRead Role = "read"
	// RoleSubmit also submits, plans and cancels jobs.
	RoleSubmit Role = "submit"
	// RoleAdmin also creates, lists and revokes tokens.
	RoleAdmin Role = "admin"
)

// Allows reports whether a token of role r may act as need.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && need.rank() > 0 }

func (r Role) rank() int {
	switch r {
	case RoleRead:
		return 1
	case RoleSubmit:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// ParseRole checks a role name.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if r.rank() == 0 {
		return "", fmt.Errorf("role: must be read, submit or admin; got %q", s)
	}
	return r, nil
}

// Token is an API token as stored: its secret is never kept, only the
// SHA-256 of the whole token, found by its public prefix.
type Token struct {
	ID         uuid.UUID  `json:"id"`
	Prefix     string     `json:"prefix"`
	Name       string     `json:"name"`
	Projects   []string   `json:"projects"`
	Role       Role       `json:"role"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	Hash       []byte     `json:"-"`
}

// Usable reports why a token may not be used at now, or "" when it may.
func (t *Token) Usable(now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "token revoked"
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return "token expired"
	}
	return ""
}

// AllProjects, as a token's only project, makes it cover every project:
// an admin token for all projects may also set the placement policy.
const AllProjects = "*"

// Sees reports whether the token covers project.
func (t *Token) Sees(project string) bool {
	for _, p := range t.Projects {
		if p == project || p == AllProjects {
			return true
		}
	}
	return false
}

// CoversAll reports whether the token covers every project.
func (t *Token) CoversAll() bool { return slices.Contains(t.Projects, AllProjects) }

// ProjectFilter is the projects a store query of the token's records is
// limited to: nil (every one) for a token of all projects.
func (t *Token) ProjectFilter() []string {
	if t.CoversAll() {
		return nil
	}
	return t.Projects
}

// tokenPrefix starts every token so that scanners and people recognise one.
const tokenPrefix = "gpuq_"

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewTokenSecret returns a fresh token, gpuq_<prefix>_<secret> with a
// 60-bit lookup prefix and a 256-bit secret, and the record to store.
func NewTokenSecret(name string, projects []string, role Role, expires *time.Time) (string, *Token, error) {
	if len(projects) == 0 {
		return "", nil, fmt.Errorf("projects: at least one project is required")
	}
	for _, p := range projects {
		if p == AllProjects && len(projects) == 1 {
			continue
		}
		if !projectRe.MatchString(p) {
			return "", nil, fmt.Errorf("projects: %q must be 1–63 lower-case letters, digits, '-' or '_', starting with a letter or digit, or \"*\" alone for every project", p)
		}
	}
	if role.rank() == 0 {
		return "", nil, fmt.Errorf("role: must be read, submit or admin; got %q", role)
	}
	if n := utf8.RuneCountInString(name); n > 200 {
		return "", nil, fmt.Errorf("name: at most 200 characters, got %d", n)
	}
	if p := TextProblem(name); p != "" {
		return "", nil, fmt.Errorf("name: %s", p)
	}
	var buf [40]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", nil, err
	}
	enc := tokenEncoding.EncodeToString(buf[:])
	secret := tokenPrefix + enc[:12] + "_" + enc[12:]
	sum := sha256.Sum256([]byte(secret))
	id, err := uuid.NewV7()
	if err != nil {
		return "", nil, err
	}
	return secret, &Token{ID: id, Prefix: enc[:12], Name: name, Projects: projects, Role: role, ExpiresAt: expires, Hash: sum[:]}, nil
}

// TokenLookupPrefix returns the public prefix of a presented token, or ""
// when it does not have a token's shape.
func TokenLookupPrefix(secret string) string {
	rest, ok := strings.CutPrefix(secret, tokenPrefix)
	if !ok || len(rest) != 12+1+52 || rest[12] != '_' {
		return ""
	}
	return rest[:12]
}

// Matches reports, in constant time, whether secret is this token.
func (t *Token) Matches(secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(sum[:], t.Hash) == 1
}
