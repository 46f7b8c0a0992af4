package genlinextest_test

//go:generate go run github.com/leasegen/leasegen/cmd/leasegen -v
