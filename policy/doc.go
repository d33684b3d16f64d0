// Package policy decides where a job may and should run. It turns a job's
// requirements, the providers' offers and the organisation's rules into a
// Decision that explains itself: the chosen offer, a ranked plan B, and every
// rejected offer with its reasons. It is pure: standard library only, no I/O
// and no clock, so every decision can be replayed and tested.
package policy
