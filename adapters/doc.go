// Package adapters defines the contract between gpuq and the providers that
// rent capacity: offers, instances, boot specs, preemption notices and the
// typed errors a provider call can end in. Each provider lives in its own
// subpackage and passes the conformance suite in adaptertest, so the
// scheduler, autoscaler and workers never see provider details.
package adapters
