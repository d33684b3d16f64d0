package queue

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCredential is a NATS user name and password. Its text form,
// "user:password" on one line, is what GPUQ_NATS_CREDENTIAL and a boot
// spec's credential carry; it never goes on a command line.
type NATSCredential struct {
	User     string
	Password string
}

// String is the credential's text form, password included: hand it only to
// the process that connects with it.
func (c NATSCredential) String() string { return c.User + ":" + c.Password }

// ParseNATSCredential reads the text form "user:password".
func ParseNATSCredential(s string) (NATSCredential, error) {
	s = strings.TrimSpace(s)
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" || strings.ContainsAny(s, " \t\r\n") || len(s) > 4096 {
		return NATSCredential{}, fmt.Errorf("nats-credential: want one line \"user:password\" of at most 4096 bytes")
	}
	return NATSCredential{User: user, Password: pass}, nil
}

// CredentialIssuer issues NATS credentials for the roles of permissions.go
// and checks them when a client connects: a password is an HMAC of the
// user name under a key only the issuer holds, so a credential for any
// pool, machine or project can be issued at once, without telling the
// server, and the role it grants is the one its user name names.
type CredentialIssuer struct {
	key []byte
}

// NewCredentialIssuer returns an issuer with a fresh random key.
func NewCredentialIssuer() (*CredentialIssuer, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &CredentialIssuer{key: key}, nil
}

// NewCredentialIssuerFromKey returns an issuer with key, at least 32 bytes:
// a server started again with the same key admits the credentials issued
// before.
func NewCredentialIssuerFromKey(key []byte) (*CredentialIssuer, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("NATS credential key: %d bytes, want at least 32", len(key))
	}
	return &CredentialIssuer{key: slices.Clone(key)}, nil
}

func (i *CredentialIssuer) password(user string) string {
	m := hmac.New(sha256.New, i.key)
	m.Write([]byte(user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Issue returns the credential of user, a role's user name (RoleUser).
func (i *CredentialIssuer) Issue(user string) (NATSCredential, error) {
	if _, _, err := ParseRoleUser(user); err != nil {
		return NATSCredential{}, err
	}
	return NATSCredential{User: user, Password: i.password(user)}, nil
}

// IssueWorker returns the credential of one machine of pool in region;
// instance may be empty for a credential the pool's workers share.
func (i *CredentialIssuer) IssueWorker(pool, region, instance string) (NATSCredential, error) {
	scope := []string{pool, region}
	if instance != "" {
		scope = append(scope, instance)
	}
	return i.Issue(RoleUser(RoleWorker, scope...))
}

// Check implements server.Authentication: it admits a client whose password
// is the one issued for its user name, with that name's role.
func (i *CredentialIssuer) Check(c server.ClientAuthentication) bool {
	opts := c.GetOpts()
	if opts == nil || opts.Username == "" {
		return false
	}
	role, _, err := ParseRoleUser(opts.Username)
	if err != nil {
		return false
	}
	if !hmac.Equal([]byte(opts.Password), []byte(i.password(opts.Username))) {
		return false
	}
	c.RegisterUser(&server.User{Username: opts.Username, Permissions: ServerPermissions(role)})
	return true
}

// ServerPermissions is role in the NATS server's terms; nil grants all.
func ServerPermissions(role NATSRole) *server.Permissions {
	if role.All() {
		return nil
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: role.Publish},
		Subscribe: &server.SubjectPermission{Allow: role.Subscribe},
	}
}
