// Package verda is the adapter for Verda (formerly DataCrunch), a GPU cloud
// with locations in Finland and Iceland, spot and on-demand. It speaks the
// Verda public REST API with OAuth2 client credentials; Verda gives spot
// instances no in-machine notice, so spot loss is read from instance state.
package verda
