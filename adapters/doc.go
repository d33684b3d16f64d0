// Package adapters defines the contract between gpuq and the providers that
// rent capacity: offers, instances, launch specs and the errors a provider can
// return. Each provider lives in its own subpackage and passes the same
// conformance suite, so the scheduler and autoscaler never see provider details.
package adapters
