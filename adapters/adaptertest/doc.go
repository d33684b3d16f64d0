// Package adaptertest is the conformance suite every provider adapter passes
// against a fake of its provider. A fake mimics the provider's documented API
// and lets the suite inject the failures the provider documents, so one suite
// proves offers, launch, idempotency, typed errors, rate limits and
// pagination for every adapter alike.
package adaptertest
