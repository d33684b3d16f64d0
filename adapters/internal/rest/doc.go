// Package rest is the HTTP plumbing the provider adapters share: bounded
// JSON bodies, Retry-After, and status codes mapped onto the contract's
// error kinds. Each adapter keeps its own provider's error codes; this
// package holds only what every REST provider does alike.
package rest
