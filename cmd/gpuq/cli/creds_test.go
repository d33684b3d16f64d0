package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/spf13/viper"
)

// A NATS server in operator mode (accounts and users as JWTs, as NGS and
// nsc-managed deployments run) is reached with a .creds file: --nats-creds
// holds the user's JWT and seed, and nothing is on the command line.
func TestNATSWithACredsFileFromAnOperatorModeServer(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	opub, _ := operator.PublicKey()
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(operator)
	must(err)
	oclaims, err := jwt.DecodeOperatorClaims(ojwt)
	must(err)
	account, err := nkeys.CreateAccount()
	must(err)
	apub, _ := account.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(operator)
	must(err)
	user, err := nkeys.CreateUser()
	must(err)
	upub, _ := user.PublicKey()
	uclaims := jwt.NewUserClaims(upub)
	uclaims.Name = "worker.eu-cpu.eu-test-1"
	ujwt, err := uclaims.Encode(account)
	must(err)
	seed, err := user.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	must(err)
	credsFile := filepath.Join(t.TempDir(), "worker.creds")
	must(os.WriteFile(credsFile, creds, 0o600))

	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, ajwt))
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{oclaims}, AccountResolver: resolver})
	must(err)
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	dialWith := func(creds string) error {
		v := viper.New()
		v.Set("nats-url", ns.ClientURL())
		if creds != "" {
			v.Set("nats-creds", creds)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := dial(ctx, v, false)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dialWith(credsFile); err != nil {
		t.Fatalf("with the .creds file: %v", err)
	}
	if err := dialWith(""); err == nil {
		t.Fatal("an operator-mode server admitted a client without credentials")
	}
	err = dialWith(filepath.Join(t.TempDir(), "missing.creds"))
	if err == nil || !strings.Contains(err.Error(), "nats-creds") {
		t.Fatalf("a missing .creds file must be named as nats-creds, got %v", err)
	}
	if strings.Contains(err.Error(), string(seed)) {
		t.Fatal("an error shows the seed")
	}
}
