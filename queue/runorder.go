package queue

import "github.com/google/uuid"

// RunOrder is the body of a run message: which placement of which job a
// worker of the pool should claim, and the residency it must respect.
type RunOrder struct {
	JobID            uuid.UUID `json:"job_id"`
	PlacementVersion int       `json:"placement_version"`
	Pool             string    `json:"pool"`
	Region           string    `json:"region"`
	Residency        string    `json:"residency,omitempty"`
	Countries        []string  `json:"countries,omitempty"`
}
