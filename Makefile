# make images: the binaries and the FROM scratch images of the compose setup.
.PHONY: images test
images:
	compose/build.sh
test:
	go test -count=1 ./...
