// Package local is the provider for `gpuq dev`: its pools are worker processes
// on this machine. Its offers come from configuration (region, country, card,
// tier and price), so the whole placement path can be exercised without a cloud.
package local
