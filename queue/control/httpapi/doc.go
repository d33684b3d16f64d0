// Package httpapi is gpuq's HTTP door: a versioned JSON API under /v1 for
// notebooks, scripts and dashboards, described by an OpenAPI 3.1 document
// generated from the handlers' types (huma). Every request carries a bearer
// token scoped to projects and a role, and is rate-limited per token.
// Live job events and logs are Server-Sent Events read from the JetStream
// event and log streams, resumable with Last-Event-ID.
package httpapi
