package queue

// DecisionReplay is what a placement was decided from besides the job
// itself: the offers (OfferSnapshot, shared by every placement of one offer
// refresh and named by the hash of its JSON) and the recipe (the job's
// requirements as placed, the rules with their budgets charged, the time
// and, for a re-placement, the previous decision and the job's history).
// Placing again with them yields the full decision, with every rejected
// offer, that the stored compact decision summarises.
type DecisionReplay struct {
	SnapshotID string
	// Offers is the snapshot's JSON; the store writes it once per snapshot.
	Offers []byte
	Recipe []byte
}
