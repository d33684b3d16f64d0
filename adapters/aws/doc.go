// Package aws rents EC2 capacity, spot and on-demand, through the AWS SDK
// for Go v2: offers from DescribeInstanceTypes, DescribeInstanceTypeOfferings
// and DescribeSpotPriceHistory (on-demand prices from configuration, since
// EC2 has no price call), launches with RunInstances and its ClientToken,
// and finds, describes and terminates instances by gpuq's tags.
// Provider errors map onto the adapters contract's kinds by EC2's documented
// error codes; the package's tests run the conformance suite against a fake
// EC2 Query API endpoint.
package aws
