// Package cli holds gpuq's cobra commands. Each command fills a plain config
// struct through viper, in the order flags > GPUQ_* environment > config file >
// defaults, and prints a table by default or JSON with -o json.
package cli
