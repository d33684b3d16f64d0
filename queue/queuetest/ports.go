package queuetest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a loopback port nothing listens on now, for a server
// that must be told its port before it starts, or come back on the port it
// had. It is chosen below the system's ephemeral range: the kernel gives
// ports of that range to outgoing connections and to servers that bind
// port 0 (every other test's), any of which could take a port picked there
// before the server binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	const lowest = 10000
	if top := ephemeralLow(); top > lowest+1000 {
		for range 200 {
			port := lowest + rand.IntN(top-lowest)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				l.Close()
				return port
			}
		}
	}
	// No room below the ephemeral range: any port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort as a loopback address, host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// ephemeralLow is the first port of the system's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
