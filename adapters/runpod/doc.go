// Package runpod rents RunPod GPU pods, interruptible (with a bid per GPU)
// and on-demand, through RunPod's GraphQL API: offers from gpuTypes and
// their lowest price per data centre, pods created with
// podRentInterruptable or podFindAndDeployOnDemand from the boot spec's
// container, found by a name carrying gpuq's ids, and ended with
// podTerminate. RunPod stops a pod with SIGTERM and SIGKILLs it 5 seconds
// later, so its workers watch SIGTERM with that grace.
package runpod
