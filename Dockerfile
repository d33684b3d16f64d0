# The gpuq image: one binary for the control plane (`gpuq server`) and the
# worker (`gpuq worker`). deploy/compose and deploy/kubernetes run it; a
# container cloud's pools (RunPod's `image`) boot it.
#
#   docker build -t gpuq .
#
# Jobs run inside the worker's container, so a pool whose jobs need CUDA,
# Python or PyTorch uses an image of its own that adds gpuq to them:
#
#   FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
#   COPY --from=gpuq /usr/local/bin/gpuq /usr/local/bin/gpuq
#   ENTRYPOINT ["gpuq"]
#
# The NVML canary needs the driver's libnvidia-ml.so.1, which the NVIDIA
# container toolkit mounts into GPU containers (`docker run --gpus`, the
# Kubernetes device plugin); nothing of the driver belongs in the image.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# cgo: the canary loads NVML through go-nvml.
RUN CGO_ENABLED=1 go build -trimpath -ldflags '-s -w' -o /out/gpuq ./cmd/gpuq

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/gpuq --create-home gpuq
COPY --from=build /out/gpuq /usr/local/bin/gpuq
# tini reaps what jobs leave behind when the worker is the container's
# first process, and passes SIGTERM (the preemption notice) on to it.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/gpuq"]
CMD ["--help"]
