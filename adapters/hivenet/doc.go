// Package hivenet is the adapter for Hivenet Compute, on-demand GPU
// capacity in the regions FR, UAE and US (only FR is in the EU). It speaks
// the Compute public REST API with an API key: presets with decimal-string
// prices and cursor pagination, read again before every create, and creates
// that are not idempotent, so a create whose answer was lost is looked for
// before any retry.
package hivenet
