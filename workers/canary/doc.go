// Package canary proves a worker's GPUs before the worker takes work: it loads
// NVML, compares the driver, CUDA version, cards, memory, ECC state, retired or
// remapped pages and temperature with what the pool expects, and optionally
// runs a probe command, all within a time budget.
// Every check is a named result carrying the expected and the found value, so a
// failed canary says exactly what drifted, and the Report is stored as JSON.
// A Gate decides when the canary runs between jobs and quarantines a node after
// consecutive failures; this is the only gpuq package that imports go-nvml.
package canary
