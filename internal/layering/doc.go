// Package layering holds the test that keeps gpuq's packages in their rooms:
// it reads every package's imports with `go list` and fails when one imports
// against the package table of the design (policy pure, workers never
// reaching PostgreSQL, drivers only where they belong). Exceptions are
// listed by name in the test, so that they stay visible and shrink.
package layering
