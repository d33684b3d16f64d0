package aws

import "strings"

// regionCountries maps AWS regions to the ISO 3166-1 country of their
// location, as AWS's region list names the city. A region missing here is
// left out of the offers: residency is never guessed.
var regionCountries = map[string]string{
	"eu-central-1":   "DE", // Frankfurt
	"eu-central-2":   "CH", // Zurich
	"eu-west-1":      "IE", // Ireland
	"eu-west-2":      "GB", // London
	"eu-west-3":      "FR", // Paris
	"eu-north-1":     "SE", // Stockholm
	"eu-south-1":     "IT", // Milan
	"eu-south-2":     "ES", // Spain
	"us-east-1":      "US", // N. Virginia
	"us-east-2":      "US", // Ohio
	"us-west-1":      "US", // N. California
	"us-west-2":      "US", // Oregon
	"ca-central-1":   "CA", // Canada
	"ap-northeast-1": "JP", // Tokyo
	"ap-southeast-1": "SG", // Singapore
	"ap-southeast-2": "AU", // Sydney
	"ap-south-1":     "IN", // Mumbai
	"sa-east-1":      "BR", // São Paulo
	"me-central-1":   "AE", // UAE
	"il-central-1":   "IL", // Tel Aviv
}

// zoneCountry is the country of an availability zone: a standard zone
// (region + one letter) is in its region's country. Local and Wavelength
// zones (eu-central-1-waw-1a is in Warsaw, not Frankfurt) are not, so they
// are left out.
func zoneCountry(region, zone string) (string, bool) {
	letter, ok := strings.CutPrefix(zone, region)
	if !ok || len(letter) != 1 || letter[0] < 'a' || letter[0] > 'z' {
		return "", false
	}
	c, ok := regionCountries[region]
	return c, ok
}
