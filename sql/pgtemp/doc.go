// Package pgtemp starts a private, throwaway PostgreSQL cluster from the
// server binaries installed on this machine (initdb and pg_ctl). `gpuq dev`
// uses it when no database URL is configured, and the tests use it for
// isolation, so a fresh machine with PostgreSQL installed needs no setup.
package pgtemp
