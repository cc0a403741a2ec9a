# make images: the binaries and the FROM scratch images of the compose setup.
.PHONY: images test agree
images:
	compose/build.sh
test:
	go test -count=1 -timeout 30m ./...
# agree: the gate/explain agreement corpus at 200,000 requests and a seed of the clock (the
# suite runs 10,000 with a fixed seed); prints the seed, so a disagreement can be replayed with
# LOCKHTTP_AGREE_SEED.
agree:
	LOCKHTTP_AGREE_N=$${LOCKHTTP_AGREE_N:-200000} LOCKHTTP_AGREE_SEED=$${LOCKHTTP_AGREE_SEED:-$$(date +%s)} \
		go test -count=1 -timeout 60m -run TestGateAndExplainAgree -v ./internal/e2e/
